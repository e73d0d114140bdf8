"""What a kubelet computes before it starts a container: the image check, environment and command.

kube-lite runs only the Isthmus image, and runs it as a process of this machine: the image's
entrypoint ``isthmus`` is this interpreter's ``python -m isthmus`` (the venv is the image). The
environment is built as kubelet's ``makeEnvironmentVariables`` builds it — ``envFrom`` in order,
then ``env`` in order (each value ``$(VAR)``-expanded against what came before and the service
variables), then the service variables not already set — on top of a clean base, not kube-lite's
own environment. Command and args are expanded against the result, as
``ExpandContainerCommandAndArgs`` does.

ConfigMaps and Secrets are read through ``Lookup`` (the caller's API client): a missing one that
is not optional is a :class:`ContainerConfigError` carrying the kubelet's message, which the
runtime reports as the container's ``CreateContainerConfigError``.
"""

from __future__ import annotations

import base64
import math
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import Any

from isthmus.api.image import IMAGE_REPOSITORY
from isthmus.kube.client import SERVICEACCOUNT_DIR_ENV

__all__ = [
    "SERVICEACCOUNT_DIR_ENV",
    "ContainerConfigError",
    "Lookup",
    "base_environment",
    "build_command",
    "container_environment",
    "expand",
    "image_repository",
    "is_isthmus_image",
    "service_environment",
]

ENTRYPOINT = "isthmus"
CARRIED_OVER = ("PATH", "LANG", "LC_ALL", "PYTHONPATH")
"""From kube-lite's own environment: what a dev tree needs to run (PYTHONPATH) and the locale."""

Obj = dict[str, Any]
Lookup = Callable[[str, str, str], Awaitable[Obj | None]]
"""(kind "ConfigMap"/"Secret", namespace, name) → the object, or None when it does not exist."""


class ContainerConfigError(Exception):
    """The container cannot be configured (yet): kube's ``CreateContainerConfigError`` message."""


def image_repository(image: str) -> str:
    """The repository of an image reference: without ``@digest`` and without ``:tag``."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


CONTAINER_ID_SCHEME = "isthmus://"


def container_id(node: str, pid: int) -> str:
    """A process container's `containerID`, as a runtime names its containers: `isthmus://<node>/<pid>`."""
    return f"{CONTAINER_ID_SCHEME}{node}/{pid}"


def container_pid(cid: str | None) -> int | None:
    """The PID in a `container_id` (None for anything else)."""
    if not cid or not cid.startswith(CONTAINER_ID_SCHEME):
        return None
    tail = cid.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else None


def is_isthmus_image(image: str | None) -> bool:
    return bool(image) and image_repository(str(image)) == IMAGE_REPOSITORY


_VAR = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand(value: str, mapping: Mapping[str, str]) -> str:
    """kube's ``$(VAR)`` expansion: ``$$`` is a literal ``$``, unknown or unterminated references
    stay as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return mapping[name] if name in mapping else m.group(0)

    return _VAR.sub(sub, value)


def base_environment(pod_dir: str, inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """A container's starting environment: what an image would set, not what kube-lite has."""
    source = os.environ if inherited is None else inherited
    env = {k: source[k] for k in CARRIED_OVER if k in source}
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env["HOME"] = pod_dir
    env["TMPDIR"] = os.path.join(pod_dir, "tmp")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def service_environment(host: str, port: int) -> dict[str, str]:
    """The ``kubernetes`` Service's variables every container gets (kubelet's getServiceEnvVarMap)."""
    addr = f"tcp://{host}:{port}"
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": addr,
        f"KUBERNETES_PORT_{port}_TCP": addr,
        f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{port}_TCP_PORT": str(port),
        f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
    }


def _ips(values: Any) -> str:
    return ",".join(str(v.get("ip")) for v in values or [] if isinstance(v, dict) and v.get("ip"))


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """kubelet's podFieldSelectorRuntimeValue (then fieldpath.ExtractFieldPathAsString)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    simple = {
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
    }
    if path in simple:
        return str(simple[path] or "")
    if path == "status.hostIPs":
        return _ips(status.get("hostIPs"))
    if path == "status.podIPs":
        return _ips(status.get("podIPs"))
    if path in ("metadata.labels", "metadata.annotations"):
        values = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
    m = _SUBSCRIPT.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise ContainerConfigError(f"unsupported fieldPath: {path}")


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))((?:[KMGTPE]i)|[numkMGTPE]?|[eE][+-]?\d+)$")


def quantity(q: Any) -> Decimal:
    m = _QUANTITY.match(str(q).strip())
    if m is None:
        raise ContainerConfigError(f"quantities must match the regular expression '{_QUANTITY.pattern}'")
    number, suffix = Decimal(m.group(1)), m.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    return number.scaleb(int(suffix[1:]))


def resource_value(pod: Mapping[str, Any], container: Mapping[str, Any], ref: Mapping[str, Any],
                   allocatable: Mapping[str, Decimal]) -> str:
    """kube's ExtractContainerResourceValue, limits left unset defaulting to the node's allocatable."""
    name = ref.get("containerName") or container.get("name")
    target = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == name), container)
    resources = target.get("resources") or {}
    resource = str(ref.get("resource") or "")
    kind, _, what = resource.partition(".")
    divisor = quantity(ref.get("divisor") or "1")
    if divisor == 0:
        divisor = Decimal(1)
    if kind == "limits":
        raw = (resources.get("limits") or {}).get(what)
        value = quantity(raw) if raw is not None else allocatable.get(what, Decimal(0))
    elif kind == "requests":
        raw = (resources.get("requests") or {}).get(what)
        value = quantity(raw) if raw is not None else Decimal(0)
    else:
        raise ContainerConfigError(f"unsupported container resource : {resource}")
    if what not in ("cpu", "memory", "ephemeral-storage") and not what.startswith("hugepages-"):
        raise ContainerConfigError(f"unsupported container resource : {resource}")
    return str(math.ceil(value / divisor))


def _data(kind: str, obj: Obj) -> dict[str, str]:
    if kind == "Secret":
        return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
    return {**{k: v for k, v in (obj.get("binaryData") or {}).items()}, **(obj.get("data") or {})}


_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


async def container_environment(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    base: Mapping[str, str],
    service: Mapping[str, str],
    lookup: Lookup,
    allocatable: Mapping[str, Decimal] | None = None,
) -> dict[str, str]:
    """The container's full environment (base, then the kubelet's variables on top)."""
    ns = str((pod.get("metadata") or {}).get("namespace") or "default")
    cache: dict[tuple[str, str], Obj | None] = {}

    async def get(kind: str, name: str) -> Obj | None:
        if (kind, name) not in cache:
            cache[kind, name] = await lookup(kind, ns, name)
        return cache[kind, name]

    def missing(kind: str, name: str) -> ContainerConfigError:
        return ContainerConfigError(f'{kind.lower()} "{name}" not found')

    tmp: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(key)
            if not ref:
                continue
            obj = await get(kind, str(ref.get("name") or ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise missing(kind, str(ref.get("name") or ""))
            for k, v in _data(kind, obj).items():
                k = f"{source.get('prefix') or ''}{k}"
                if _ENV_NAME.match(k):  # kube skips invalid names (with an event)
                    tmp[k] = v

    def mapping_get(name: str) -> str | None:
        return tmp.get(name, service.get(name))

    class _Map(dict[str, str]):
        def __contains__(self, name: object) -> bool:
            return isinstance(name, str) and mapping_get(name) is not None

        def __getitem__(self, name: str) -> str:
            value = mapping_get(name)
            if value is None:
                raise KeyError(name)
            return value

    for var in container.get("env") or []:
        name = str(var.get("name"))
        value = var.get("value")
        source = var.get("valueFrom") or {}
        if value:
            tmp[name] = expand(str(value), _Map())
            continue
        if not source:
            tmp[name] = ""
            continue
        if source.get("fieldRef"):
            tmp[name] = field_value(pod, str(source["fieldRef"].get("fieldPath")))
        elif source.get("resourceFieldRef"):
            tmp[name] = resource_value(pod, container, source["resourceFieldRef"], allocatable or {})
        else:
            for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                ref = source.get(key)
                if not ref:
                    continue
                ref_name, ref_key, optional = str(ref.get("name") or ""), str(ref.get("key")), ref.get("optional")
                obj = await get(kind, ref_name)
                if obj is None:
                    if optional:
                        break
                    raise missing(kind, ref_name)
                data = _data(kind, obj)
                if ref_key not in data:
                    if optional:
                        break
                    raise ContainerConfigError(f"couldn't find key {ref_key} in {kind} {ns}/{ref_name}")
                tmp[name] = data[ref_key]
    for k, v in service.items():
        tmp.setdefault(k, v)
    return {**base, **tmp}


def build_command(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """argv: command and args expanded; the image's entrypoint (or an ``isthmus`` command) is this
    interpreter's ``-m isthmus``."""
    command = [expand(str(c), env) for c in container.get("command") or []]
    args = [expand(str(a), env) for a in container.get("args") or []]
    if not command:
        command = [ENTRYPOINT]
    if os.path.basename(command[0]) == ENTRYPOINT:
        command = [sys.executable, "-m", "isthmus", *command[1:]]
    return [*command, *args]


async def get_object(client: Any, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """A ConfigMap, Secret or ServiceAccount a Pod refers to, as a dict; None when it does not exist
    (other API errors propagate: the caller says what they mean for the container)."""
    from lightkube import ApiError
    from lightkube.resources.core_v1 import ConfigMap, Secret, ServiceAccount

    from isthmus.kube.helpers import is_not_found

    res: Any = {"ConfigMap": ConfigMap, "Secret": Secret, "ServiceAccount": ServiceAccount}[kind]
    try:
        return dict((await client.get(res, name, namespace=namespace)).to_dict())
    except ApiError as e:
        if is_not_found(e):
            return None
        raise
