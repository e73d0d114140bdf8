"""The deploy/ manifests: where they are, a small kustomize to render them, and server-side apply.

`kubectl apply -k deploy/member` is how users install Isthmus; `isthmus deploy-broker` and `isthmus up`
(when kubectl is missing) need the same objects without kubectl, so `render` implements the part of
kustomize our kustomizations use — `resources` (files and directories), `components`, `namespace`,
`images` and JSON 6902 `patches` (the local clusterset's overlay uses them) — and a test holds it equal
to `kubectl kustomize` for every kustomization in deploy/. Keep the kustomizations within that subset
(no generators, labels or strategic-merge patches) or extend this and its test.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable, Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any, cast

import yaml
from lightkube import AsyncClient
from lightkube.core.resource import NamespacedResource
from lightkube.core.resource_registry import resource_registry
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.types import PatchType

from isthmus.kube.helpers import wait_established

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")

# kustomize's legacy output order (api/resid/gvk.go), which is also the order kubectl applies in:
# what others depend on (namespaces, CRDs, accounts, roles) before the workloads using them.
_ORDER_FIRST = (
    "Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount",
    "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap", "Secret",
    "Endpoints", "Service", "LimitRange", "PriorityClass", "PersistentVolume", "PersistentVolumeClaim",
    "Deployment", "StatefulSet", "CronJob", "PodDisruptionBudget",
)
_ORDER_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")

# The kinds kustomize v5.5's built-in schema knows as cluster-scoped (which the namespace transformer
# leaves alone); like kustomize, any other kind — custom ones, and kinds newer than its schema such as
# ValidatingAdmissionPolicy — is taken as namespaced. `apply` asks lightkube for the real scope.
KUSTOMIZE_CLUSTER_SCOPED = frozenset({
    "APIService", "CertificateSigningRequest", "ClusterRole", "ClusterRoleBinding", "ComponentStatus",
    "CSIDriver", "CSINode", "CustomResourceDefinition", "IngressClass", "MutatingWebhookConfiguration",
    "Namespace", "Node", "PersistentVolume", "PriorityClass", "RuntimeClass", "SelfSubjectAccessReview",
    "StorageClass", "SubjectAccessReview", "TokenReview", "ValidatingWebhookConfiguration",
    "VolumeAttachment",
})


class ManifestError(Exception):
    """A kustomization this renderer cannot build (missing file, unsupported field, duplicate object)."""


def deploy_dir() -> Path:
    """The deploy/ directory: <repo>/deploy in a source checkout or editable install (reached through
    the src/isthmus/_deploy symlink), isthmus/_deploy inside an installed wheel."""
    path = Path(str(files("isthmus") / "_deploy"))
    if (path / "member").is_dir():
        return path.resolve()
    repo = Path(__file__).resolve().parents[3] / "deploy"  # src/isthmus/kube/manifests.py → <repo>
    if repo.is_dir():
        return repo
    raise ManifestError(f"the deploy/ manifests are not installed (looked in {path} and {repo})")


# --- render ---------------------------------------------------------------------------------------


def render(path: Path, namespace: str | None = None) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize <path>` prints, in its order. `namespace` replaces the top
    kustomization's `namespace:` (or adds one), as `kustomize edit set namespace` would."""
    objs = _build(Path(path), namespace, top=True, seen=())
    return sorted(objs, key=_legacy_key)


def _build(
    path: Path, namespace: str | None, *, top: bool, seen: tuple[Path, ...],
    into: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The objects of the kustomization at `path`. A Component gets `into`, what the including
    kustomization has so far: it adds its resources to them, then its transformers act on all of
    it (kustomize's semantics)."""
    path = path.resolve()
    if path in seen:
        raise ManifestError(f"kustomization {path} includes itself")
    kfile = _kustomization_file(path)
    doc = _load_one(kfile)
    kind = doc.get("kind", "Kustomization")
    if kind not in ("Kustomization", "Component"):
        raise ManifestError(f"{kfile}: kind {kind!r} is not Kustomization or Component")
    if (kind == "Component") != (into is not None):
        raise ManifestError(f"{kfile}: a {kind} cannot be used as a " + ("component" if into is not None else
                                                                         "resource"))
    supported = {"apiVersion", "kind", "metadata", "resources", "components", "namespace", "images", "patches"}
    unsupported = sorted(set(doc) - supported)
    if unsupported:
        raise ManifestError(f"{kfile}: unsupported kustomize field(s) {', '.join(unsupported)}")
    objs: list[dict[str, Any]] = list(into) if into is not None else []
    for entry in doc.get("resources") or []:
        target = path / str(entry)
        if target.is_dir():
            _add(objs, _build(target, None, top=False, seen=(*seen, path)), kfile)
        elif target.is_file():
            _add(objs, _load_all(target), kfile)
        else:
            raise ManifestError(f"{kfile}: resource {entry!r} not found")
    for entry in doc.get("components") or []:
        objs = _build(path / str(entry), None, top=False, seen=(*seen, path), into=objs)
    _transform(objs, doc, namespace if top and namespace is not None else doc.get("namespace"), path)
    return objs


def _transform(objs: list[dict[str, Any]], doc: Mapping[str, Any], namespace: str | None, where: Path) -> None:
    """kustomize's built-in transformers, in its order: patches, namespace, images."""
    for patch in doc.get("patches") or []:
        _patch(objs, patch, where)
    if namespace:
        _set_namespace(objs, namespace)
        ids = [_id(o) for o in objs]
        if len(set(ids)) != len(ids):
            clash = sorted({i for i in ids if ids.count(i) > 1})[0]
            raise ManifestError(f"{where}: namespace {namespace} makes two objects {clash[1]} {clash[3]}")
    for image in doc.get("images") or []:
        for obj in objs:
            _set_images(obj, image)


def _patch(objs: list[dict[str, Any]], entry: Mapping[str, Any], where: Path) -> None:
    """One `patches` entry: a JSON 6902 patch (inline `patch` or file `path`) on every `target` match."""
    text = entry.get("patch")
    if text is None and entry.get("path"):
        text = (where / str(entry["path"])).read_text()
    ops = yaml.safe_load(text) if isinstance(text, str) else None
    target = entry.get("target")
    if not isinstance(ops, list) or not isinstance(target, dict):
        raise ManifestError(f"{where}: only JSON 6902 patches with a target are supported")
    for key in target:
        if key not in ("group", "version", "kind", "name", "namespace"):
            raise ManifestError(f"{where}: patch target field {key!r} is not supported")
    matched = [o for o in objs if _matches(o, target)]
    if not matched:
        raise ManifestError(f"{where}: patch target {target} matches no object")
    for obj in matched:
        for op in ops:
            _json_patch(obj, op, where)


def _matches(obj: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    meta = obj.get("metadata") or {}
    have = {"group": group, "version": version, "kind": obj["kind"], "name": meta.get("name"),
            "namespace": meta.get("namespace") or ""}
    return all(have[k] == v for k, v in target.items())


def _json_patch(obj: dict[str, Any], op: Mapping[str, Any], where: Path) -> None:
    kind, path = op.get("op"), op.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ManifestError(f"{where}: JSON patch path {path!r} is not a JSON pointer")
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
    try:
        parent: Any = obj
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if kind in ("add", "replace"):
            value = copy.deepcopy(op.get("value"))
            if isinstance(parent, list):
                if last == "-":
                    parent.append(value)
                elif kind == "add":
                    parent.insert(int(last), value)
                else:
                    parent[int(last)] = value
            else:  # kustomize's replace adds a missing key as well
                parent[last] = value
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif kind == "test":  # RFC 6902: the patch fails unless the value is there (a guard on an index)
            have = parent[int(last)] if isinstance(parent, list) else parent[last]
            if have != op.get("value"):
                raise ManifestError(f"{where}: JSON patch test {path}: {obj['kind']} {obj['metadata']['name']} "
                                    f"has {have!r}, not {op.get('value')!r}")
        else:
            raise ManifestError(f"{where}: JSON patch op {kind!r} is not supported (add, replace, remove, test)")
    except (KeyError, IndexError, ValueError, TypeError):
        raise ManifestError(f"{where}: JSON patch {kind} {path}: no such path in {obj['kind']} "
                            f"{obj['metadata']['name']}") from None


def _kustomization_file(path: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        if (path / name).is_file():
            return path / name
    raise ManifestError(f"no kustomization.yaml in {path}")


def _load_one(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        raise ManifestError(f"{path} is not a YAML mapping")
    return doc


def _load_all(path: Path) -> list[dict[str, Any]]:
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        if doc is None:
            continue
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
            raise ManifestError(f"{path}: every document must be an object with apiVersion and kind")
        if not (doc.get("metadata") or {}).get("name"):
            raise ManifestError(f"{path}: a {doc['kind']} has no metadata.name")
        out.append(doc)
    return out


def _id(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (str(obj["apiVersion"]), str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"]))


def _add(objs: list[dict[str, Any]], new: Iterable[dict[str, Any]], where: Path) -> None:
    known = {_id(o) for o in objs}
    for obj in new:
        if _id(obj) in known:
            raise ManifestError(f"{where}: {obj['kind']} {obj['metadata']['name']} is defined twice")
        known.add(_id(obj))
        objs.append(obj)


def _set_images(node: Any, image: Mapping[str, Any]) -> None:
    """kustomize's images transformer: every container and initContainer image named `name`."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for container in value:
                    if isinstance(container, dict) and isinstance(container.get("image"), str):
                        container["image"] = _retag(container["image"], image)
            _set_images(value, image)
    elif isinstance(node, list):
        for item in node:
            _set_images(item, image)


def _retag(ref: str, image: Mapping[str, Any]) -> str:
    name, sep, digest = ref.partition("@")
    tag = ""
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    if name != image.get("name"):
        return ref
    name = str(image.get("newName") or name)
    if image.get("digest"):
        return f"{name}@{image['digest']}"
    if image.get("newTag") is not None:
        return f"{name}:{image['newTag']}"
    return name + (f":{tag}" if tag else "") + (f"{sep}{digest}" if sep else "")


def _set_namespace(objs: list[dict[str, Any]], namespace: str) -> None:
    """kustomize's namespace transformer, with the back-references it fixes up: binding subjects
    naming a moved ServiceAccount (or the `default` one), and webhook configurations' service
    references to a moved Service, follow it."""
    moved: dict[tuple[str, str], str] = {}
    services: set[tuple[str, str]] = set()
    for obj in objs:
        meta = obj.setdefault("metadata", {})
        if obj["kind"] == "Namespace" and obj["apiVersion"] == "v1":
            meta["name"] = namespace
        elif obj["kind"] not in KUSTOMIZE_CLUSTER_SCOPED:
            if obj["kind"] == "ServiceAccount" and obj["apiVersion"] == "v1":
                moved[(meta["name"], meta.get("namespace") or "")] = namespace
            if obj["kind"] == "Service" and obj["apiVersion"] == "v1":
                services.add((meta["name"], meta.get("namespace") or ""))
            meta["namespace"] = namespace
    for obj in objs:
        if obj["kind"] not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            continue
        for hook in obj.get("webhooks") or []:
            ref = (hook.get("clientConfig") or {}).get("service")
            if isinstance(ref, dict) and (str(ref.get("name")), str(ref.get("namespace") or "")) in services:
                ref["namespace"] = namespace
    for obj in objs:
        if obj["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        for subject in obj.get("subjects") or []:
            if not isinstance(subject, dict) or subject.get("kind") != "ServiceAccount":
                continue
            name, ns = str(subject.get("name")), str(subject.get("namespace") or "")
            if name == "default":
                subject["namespace"] = namespace
            elif (name, ns) in moved or (not ns and any(n == name for n, _ in moved)):
                subject["namespace"] = namespace


def _rank(kind: str) -> int:
    if kind in _ORDER_FIRST:
        return _ORDER_FIRST.index(kind) - len(_ORDER_FIRST)
    if kind in _ORDER_LAST:
        return _ORDER_LAST.index(kind) + 1
    return 0


def _legacy_key(obj: Mapping[str, Any]) -> tuple[int, str, str, str]:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    gvk = f"{group or '~G'}_{version or '~V'}_{obj['kind']}"
    meta = obj.get("metadata") or {}
    return (_rank(str(obj["kind"])), gvk, str(meta.get("namespace") or "~X"), str(meta["name"]))


# --- apply ----------------------------------------------------------------------------------------


async def apply(client: AsyncClient, objs: Iterable[Mapping[str, Any]], field_manager: str) -> None:
    """Server-side apply every object, forcing conflicts, as `kubectl apply --server-side
    --force-conflicts` would: Namespaces and CRDs first, then — once every CRD is served — the rest
    in kustomize's dependency order. Bound it with `asyncio.timeout`."""
    ordered = sorted((copy.deepcopy(dict(o)) for o in objs), key=_legacy_key)
    first = [o for o in ordered if o["kind"] in ("Namespace", "CustomResourceDefinition")]
    rest = [o for o in ordered if o["kind"] not in ("Namespace", "CustomResourceDefinition")]
    for obj in first:
        await _apply_one(client, obj, field_manager)
    crds = [o for o in first if o["kind"] == "CustomResourceDefinition"]
    await asyncio.gather(*(wait_established(client, o["metadata"]["name"]) for o in crds))
    for crd in crds:
        _register_crd(crd)
    for obj in rest:
        await _apply_one(client, obj, field_manager)


async def _apply_one(client: AsyncClient, obj: dict[str, Any], field_manager: str) -> None:
    res = _resource(obj)
    meta = obj.get("metadata") or {}
    meta.pop("managedFields", None)
    meta.pop("resourceVersion", None)
    namespace = None
    if issubclass(res, NamespacedResource):
        namespace = meta.get("namespace")
    else:  # kustomize namespaces kinds newer than its schema (ValidatingAdmissionPolicy): undo that
        meta.pop("namespace", None)
    await cast(Any, client).patch(
        res, meta["name"], obj, namespace=namespace, patch_type=PatchType.APPLY,
        field_manager=field_manager, force=True,
    )


def _resource(obj: Mapping[str, Any]) -> Any:
    try:
        return resource_registry.load(obj["apiVersion"], obj["kind"])
    except Exception as err:  # lightkube raises LoadResourceError for kinds it was never told of
        raise ManifestError(
            f"cannot apply {obj['kind']} {obj['metadata']['name']}: {obj['apiVersion']} {obj['kind']} is neither "
            "a built-in kind nor defined by a CustomResourceDefinition among the manifests"
        ) from err


def _register_crd(crd: Mapping[str, Any]) -> None:
    spec = crd["spec"]
    create = create_namespaced_resource if spec.get("scope") == "Namespaced" else create_global_resource
    for version in spec.get("versions") or []:
        create(spec["group"], version["name"], spec["names"]["kind"], spec["names"]["plural"])
