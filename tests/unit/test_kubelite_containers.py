"""What kube-lite computes before starting an Isthmus container, checked against kubelet's rules."""

from __future__ import annotations

import base64
import sys
from decimal import Decimal
from typing import Any

import pytest

from isthmus.local.kubelite.containers import (
    ContainerConfigError,
    base_environment,
    build_command,
    container_environment,
    expand,
    image_repository,
    is_isthmus_image,
    service_environment,
)
from isthmus.local.kubelite.processes import pod_phase

POD: dict[str, Any] = {
    "metadata": {"name": "agent-0", "namespace": "isthmus", "uid": "u-1", "labels": {"app": "agent"},
                 "annotations": {"a/b": "c"}},
    "spec": {"nodeName": "c1-node", "serviceAccountName": "agent", "containers": [
        {"name": "main", "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}}}]},
    "status": {"podIP": "127.101.0.5", "podIPs": [{"ip": "127.101.0.5"}], "hostIP": "127.0.0.1",
               "hostIPs": [{"ip": "127.0.0.1"}]},
}
OBJECTS: dict[tuple[str, str], dict[str, Any]] = {
    ("ConfigMap", "conf"): {"data": {"LEVEL": "debug", "PORT": "53", "bad name": "x"}},
    ("Secret", "creds"): {"data": {"TOKEN": base64.b64encode(b"s3cret").decode()}},
}


async def lookup(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    assert namespace == "isthmus"
    return OBJECTS.get((kind, name))


async def env_of(container: dict[str, Any]) -> dict[str, str]:
    return await container_environment(
        POD, {"name": "main", **container}, base={"HOME": "/pod"}, service=service_environment("127.0.0.1", 6443),
        lookup=lookup, allocatable={"cpu": Decimal(4), "memory": Decimal(2**30)},
    )


def test_image_recognised_by_repository_with_any_tag_or_digest() -> None:
    assert is_isthmus_image("ghcr.io/isthmus-net/isthmus:0.1.0")
    assert is_isthmus_image("ghcr.io/isthmus-net/isthmus@sha256:" + "a" * 64)
    assert is_isthmus_image("ghcr.io/isthmus-net/isthmus")
    assert not is_isthmus_image("ghcr.io/isthmus-net/isthmus-other:1")
    assert not is_isthmus_image("nginx")
    assert image_repository("localhost:5000/x/y:tag") == "localhost:5000/x/y"
    assert image_repository("localhost:5000/x/y") == "localhost:5000/x/y"


def test_expansion_as_kube() -> None:
    m = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)", m) == "1-two"
    assert expand("$$(A)", m) == "$(A)"  # escaped
    assert expand("$(UNKNOWN)", m) == "$(UNKNOWN)"
    assert expand("$(A", m) == "$(A"
    assert expand("cost $5", m) == "cost $5"
    assert expand("$$$(A)", m) == "$1"


async def test_env_order_precedence_and_downward_api() -> None:
    env = await env_of({
        "envFrom": [{"configMapRef": {"name": "conf"}}, {"secretRef": {"name": "creds"}, "prefix": "S_"}],
        "env": [
            {"name": "LEVEL", "value": "info"},  # env wins over envFrom
            {"name": "ADDR", "value": "$(POD_IP):$(PORT)"},  # POD_IP not defined yet: left as written
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "LISTEN", "value": "$(POD_IP):$(PORT) on $(KUBERNETES_SERVICE_HOST)"},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "ANN", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['a/b']"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
            {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "TOKEN"}}},
            {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "CPU_REQ", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
            {"name": "EMPTY"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": "1"},  # the container's own value wins
        ],
    })
    assert env["HOME"] == "/pod"
    assert env["LEVEL"] == "info" and env["PORT"] == "53" and env["S_TOKEN"] == "s3cret"
    assert "bad name" not in env
    assert env["ADDR"] == "$(POD_IP):53"
    assert env["LISTEN"] == "127.101.0.5:53 on 127.0.0.1"
    assert (env["NAME"], env["NS"], env["UID"], env["APP"], env["ANN"]) == ("agent-0", "isthmus", "u-1", "agent", "c")
    assert (env["NODE"], env["SA"], env["IPS"], env["HOST"]) == ("c1-node", "agent", "127.101.0.5", "127.0.0.1")
    assert env["TOKEN"] == "s3cret"
    assert (env["MEM"], env["CPU"], env["CPU_REQ"]) == ("64", "4", "250")
    assert env["EMPTY"] == ""
    assert env["KUBERNETES_SERVICE_PORT"] == "1"
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and env["KUBERNETES_SERVICE_PORT_HTTPS"] == "6443"


@pytest.mark.parametrize(
    ("container", "message"),
    [
        ({"envFrom": [{"configMapRef": {"name": "nope"}}]}, 'configmap "nope" not found'),
        ({"envFrom": [{"secretRef": {"name": "nope"}}]}, 'secret "nope" not found'),
        ({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "NOPE"}}}]},
         "couldn't find key NOPE in ConfigMap isthmus/conf"),
        ({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "NOPE"}}}]},
         "couldn't find key NOPE in Secret isthmus/creds"),
        ({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}]},
         'secret "gone" not found'),
    ],
)
async def test_missing_references_are_config_errors(container: dict[str, Any], message: str) -> None:
    with pytest.raises(ContainerConfigError) as err:
        await env_of(container)
    assert str(err.value) == message


async def test_optional_references_are_skipped() -> None:
    env = await env_of({
        "envFrom": [{"configMapRef": {"name": "nope", "optional": True}}],
        "env": [
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "NOPE", "optional": True}}},
            {"name": "Y", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": True}}},
        ],
    })
    assert "X" not in env and "Y" not in env


def test_command_entrypoint_is_this_interpreter() -> None:
    env = {"POD_IP": "127.0.0.9"}
    assert build_command({"args": ["dns", "--listen", "$(POD_IP):53"]}, env) == [
        sys.executable, "-m", "isthmus", "dns", "--listen", "127.0.0.9:53"]
    assert build_command({"command": ["isthmus", "agent"], "args": ["--x=$$(POD_IP)"]}, env) == [
        sys.executable, "-m", "isthmus", "agent", "--x=$(POD_IP)"]
    assert build_command({"command": ["/usr/local/bin/isthmus", "proxy"]}, env)[:4] == [
        sys.executable, "-m", "isthmus", "proxy"]
    assert build_command({"command": ["sh", "-c", "echo $(POD_IP)"]}, env) == ["sh", "-c", "echo 127.0.0.9"]


def test_base_environment_is_clean() -> None:
    env = base_environment("/pods/u", {"PATH": "/bin", "PYTHONPATH": "/src", "SECRET": "x", "KUBECONFIG": "/k"})
    assert env == {"PATH": "/bin", "PYTHONPATH": "/src", "HOME": "/pods/u", "TMPDIR": "/pods/u/tmp",
                   "PYTHONUNBUFFERED": "1"}


def _s(state: str, code: int = 0, last: bool = False) -> dict[str, Any]:
    body = {"exitCode": code} if state == "terminated" else {}
    s: dict[str, Any] = {"state": {state: body}}
    if last:
        s["lastState"] = {"terminated": {"exitCode": 1}}
    return s


@pytest.mark.parametrize(
    ("policy", "statuses", "phase"),
    [
        ("Always", [_s("waiting")], "Pending"),
        ("Always", [_s("running"), _s("waiting")], "Pending"),
        ("Always", [_s("running")], "Running"),
        ("Always", [_s("waiting", last=True)], "Running"),
        ("Always", [_s("terminated", 0)], "Running"),
        ("Never", [_s("terminated", 0)], "Succeeded"),
        ("Never", [_s("terminated", 0), _s("terminated", 2)], "Failed"),
        ("OnFailure", [_s("terminated", 0)], "Succeeded"),
        ("OnFailure", [_s("waiting", last=True)], "Running"),
    ],
)
def test_pod_phase_as_kubelet(policy: str, statuses: list[dict[str, Any]], phase: str) -> None:
    assert pod_phase({"restartPolicy": policy}, statuses) == phase


def test_token_refresh_as_the_kubelet(tmp_path: Any) -> None:
    """A new token once the current one is older than 80% of its lifetime, or 24 h."""
    from isthmus.kube.tokens import Lifetime
    from isthmus.local.kubelite.credentials import Credentials, automount, write_atomic

    creds = Credentials(None, tmp_path, fallback_ca=None)  # type: ignore[arg-type]
    assert creds.needs_refresh(now=0.0)
    creds._token = Lifetime(issued=1000.0, expires=1000.0 + 3607)
    assert not creds.needs_refresh(now=1000.0 + 0.79 * 3607)
    assert creds.needs_refresh(now=1000.0 + 0.81 * 3607)
    creds._token = Lifetime(issued=0.0, expires=365 * 86400.0)  # the apiserver extended it to a year
    assert not creds.needs_refresh(now=23 * 3600.0)
    assert creds.needs_refresh(now=24 * 3600.0 + 1)

    assert automount({"spec": {}}, None) is True
    assert automount({"spec": {}}, {"automountServiceAccountToken": False}) is False
    assert automount({"spec": {"automountServiceAccountToken": True}}, {"automountServiceAccountToken": False})

    write_atomic(tmp_path / "token", b"one")
    write_atomic(tmp_path / "token", b"two")
    assert (tmp_path / "token").read_bytes() == b"two" and sorted(p.name for p in tmp_path.iterdir()) == ["token"]


def test_back_off_is_printed_as_go_durations() -> None:
    from isthmus.local.kubelite.processes import go_duration

    assert [go_duration(s) for s in (0.5, 10, 20, 80, 160, 300, 2.5)] == [
        "500ms", "10s", "20s", "1m20s", "2m40s", "5m0s", "2.5s"]
