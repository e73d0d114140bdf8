"""Whether a CRD someone else installed for an API Isthmus shares (mcs-api's, Karmada's) can serve
Isthmus, and who installed it.

Submariner, Cilium's MCS and Karmada ship their own copies of these CRDs, with other schemas. Isthmus
must not overwrite them (their controllers rely on them) nor refuse them when they carry what
Isthmus reads and writes. A field absent from a structural schema is pruned by the apiserver, so
"compatible" means: same kind and scope, our version served (the storage version of our CRD, the
one Isthmus's clients speak: v1beta1 for mcs-api), a status subresource where we write status, and
every field of the upstream API Isthmus uses present. A copy serving only an older version (mcs-api
before v0.5 serves v1alpha1 alone) is incompatible, and says so: its project's upgrade fixes it. Isthmus's extensions
(e.g. ServiceExport's exportedLabels, MultiClusterService's per-cluster report) are listed as not
stored: their features are lost on that cluster, nothing else is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from isthmus.api.crdgen import PART_OF, PART_OF_LABEL, storage_version

ISTHMUS = "Isthmus"

ESSENTIAL_FIELDS: Mapping[str, tuple[str, ...]] = {
    # mcs-api v1beta1 (v0.5): the agent writes Valid/Conflict/Ready conditions.
    "serviceexports.multicluster.x-k8s.io": (
        "status.conditions[].type", "status.conditions[].status", "status.conditions[].reason",
        "status.conditions[].message", "status.conditions[].lastTransitionTime",
    ),
    # What the agent writes and DNS and the proxy read: the families of the VIPs, and the Ready
    # condition v1beta1 defines on imports.
    "serviceimports.multicluster.x-k8s.io": (
        "spec.type", "spec.ips", "spec.ipFamilies", "spec.ports[].name", "spec.ports[].protocol",
        "spec.ports[].port", "spec.sessionAffinity", "status.clusters[].cluster", "status.conditions[].type",
        "status.conditions[].status", "status.conditions[].reason", "status.conditions[].message",
        "status.conditions[].lastTransitionTime",
    ),
    # Karmada's networking.karmada.io/v1alpha1 fields exposure reads, and the address it reports.
    "multiclusterservices.networking.karmada.io": (
        "spec.types", "spec.ports[].name", "spec.ports[].port", "spec.providerClusters[].name",
        "spec.consumerClusters[].name", "status.loadBalancer.ingress[].ip", "status.conditions[].type",
        "status.conditions[].status", "status.conditions[].reason", "status.conditions[].message",
    ),
    # about-api's ClusterProperty: join writes the value, the agent and DNS read it.
    "clusterproperties.about.k8s.io": ("spec.value",),
}
"""Per shared CRD, the fields of the upstream API Isthmus reads or writes: without one, it cannot work."""

_LABELS_NAMING_INSTALLER = ("app.kubernetes.io/part-of", "app.kubernetes.io/managed-by", "app.kubernetes.io/name",
                            "app")


def installed_by(crd: Mapping[str, Any]) -> str | None:
    """`Isthmus` when we installed it (our label, or an `isthmus*` field manager), else the project its
    labels name, else the field manager that wrote its spec first; None when nothing says."""
    meta = crd.get("metadata") or {}
    labels = meta.get("labels") or {}
    writers = _spec_writers(meta.get("managedFields") or [])
    if labels.get(PART_OF_LABEL) == PART_OF or any(w.startswith("isthmus") for w in writers):
        return ISTHMUS
    for key in _LABELS_NAMING_INSTALLER:
        if labels.get(key):
            return str(labels[key])
    return writers[0] if writers else None


def _spec_writers(managed: list[Mapping[str, Any]]) -> list[str]:
    """Managers of the CRD itself, oldest first (the apiserver's own status writes are not installs)."""
    entries = [m for m in managed if m.get("subresource") != "status" and m.get("manager")]
    entries.sort(key=lambda m: str(m.get("time") or ""))
    return [str(m["manager"]) for m in entries]


def incompatibilities(existing: Mapping[str, Any], ours: Mapping[str, Any]) -> list[str]:
    """What the installed CRD lacks for Isthmus to use it (empty: compatible)."""
    spec, want = existing.get("spec") or {}, ours["spec"]
    problems = []
    if (spec.get("names") or {}).get("kind") != want["names"]["kind"]:
        problems.append(f"kind {(spec.get('names') or {}).get('kind')!r}, not {want['names']['kind']!r}")
    if spec.get("scope") != want["scope"]:
        problems.append(f"scope {spec.get('scope')}, not {want['scope']}")
    our_version = storage_version(ours)
    version = _served(existing, our_version["name"])
    if version is None:
        served = [v["name"] for v in spec.get("versions") or [] if v.get("served")]
        problem = f"does not serve {our_version['name']} (serves {', '.join(served) or 'no version'})"
        older = [v["name"] for v in want["versions"] if not v.get("storage") and v["name"] in served]
        if older:
            problem += (f": it predates {our_version['name']}, which Isthmus speaks; upgrading that project's "
                        f"CRD to one serving {our_version['name']} fixes it")
        problems.append(problem)
        return problems
    if "status" in (our_version.get("subresources") or {}) and "status" not in (version.get("subresources") or {}):
        problems.append("no status subresource")
    schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
    missing = [p for p in ESSENTIAL_FIELDS.get(ours["metadata"]["name"], ()) if not has_field(schema, p)]
    if missing:
        problems.append(f"no field {', '.join(missing)}")
    return problems


def not_stored(existing: Mapping[str, Any], ours: Mapping[str, Any]) -> list[str]:
    """Fields of our schema the installed one would prune (outermost only): Isthmus's extensions,
    whose features do not work with that CRD."""
    our_version = storage_version(ours)
    version = _served(existing, our_version["name"])
    if version is None:
        return []
    theirs = (version.get("schema") or {}).get("openAPIV3Schema") or {}
    out: list[str] = []
    for path in field_paths(our_version["schema"]["openAPIV3Schema"]):
        if path.split(".")[0] in ("apiVersion", "kind", "metadata"):
            continue
        if any(path.startswith(p + ".") or path.startswith(p + "[]") or path.startswith(p + "{}") for p in out):
            continue
        if not has_field(theirs, path):
            out.append(path)
    return out


def _served(crd: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    return next((v for v in (crd.get("spec") or {}).get("versions") or []
                 if v.get("name") == name and v.get("served")), None)


def field_paths(schema: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Every field of a structural schema, parents first: `a.b`, `a.list[].c`, `a.map{}.d`."""
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{key}" if prefix else key
        yield path
        yield from field_paths(sub, path)
    if isinstance(schema.get("items"), Mapping):
        yield from field_paths(schema["items"], prefix + "[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from field_paths(schema["additionalProperties"], prefix + "{}")


_STEP = re.compile(r"([^.\[\]{}]+)|(\[\])|(\{\})")


def has_field(schema: Mapping[str, Any], path: str) -> bool:
    """Whether the schema keeps `path` (a `field_paths` spelling): declared, or under a node that
    preserves unknown fields (which the apiserver does not prune)."""
    node: Mapping[str, Any] = schema
    for name, items, _values in _STEP.findall(path):
        if name:
            sub = (node.get("properties") or {}).get(name)
        elif items:
            sub = node.get("items")
        else:
            extra = node.get("additionalProperties")
            sub = extra if isinstance(extra, Mapping) else ({} if extra is True else None)
        if not isinstance(sub, Mapping):
            return bool(name and node.get("x-kubernetes-preserve-unknown-fields"))
        node = sub
    return True
