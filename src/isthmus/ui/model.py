"""The web view's model, pure: objects seen per cluster in, the page's view out.

`Store` holds every watched object as a plain dict, by cluster (kubeconfig context), Kind and
`namespace/name`, plus what each cluster's connection is going through. `build_view` turns it into
the sections the page shows, each a mapping of a stable id to a JSON-able item:

- `clusters`: the broker and every member: reachable or not (with the error), joined, heartbeat,
  CIDRs, the Ready condition, its parts (Deployments in isthmus-system and their readiness) and the
  problems that make it unhealthy;
- `services`: one per `namespace/name` exported or imported anywhere: exporters with their
  conditions, importers with VIP, ports and endpoints per source cluster, conflicts in plain words;
- `mcs`, `pools`, `egress`: MultiClusterServices, LoadBalancerPools, and the egress objects.

`diff` gives what changed between two views: the browser gets one snapshot, then only these.
Heartbeat staleness depends on the time, not only on objects: items carry the heartbeat's
timestamp and the threshold so the page ages them by its own clock between updates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from isthmus.api.lb import PUBLIC_ROLE
from isthmus.api.mcs import (
    HEARTBEAT_ANNOTATION,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    STALE_HEARTBEAT_SECONDS,
    mcs_service_name,
)
from isthmus.ui.kinds import BROKER_ROLE

SECTIONS = ("clusters", "services", "mcs", "pools", "egress")
EGRESS_KINDS = ("SourceIPClass", "SourceIPClaim", "SourceIP", "ExternalService", "Gateway")

HEALTHY = "healthy"
UNHEALTHY = "unhealthy"
UNREACHABLE = "unreachable"
UNKNOWN = "unknown"


@dataclass
class Connection:
    """How the watches of one cluster are going."""

    role: str
    server: str = ""
    error: str | None = None
    """Why the cluster's API cannot be reached now (a watch or list failed to connect), or None."""
    synced: bool = False
    kind_errors: dict[str, str] = field(default_factory=dict)
    """Kinds the API refused (403, an unserved CRD...): shown, but not a dead cluster."""


class Store:
    """Every watched object as a plain dict: cluster → Kind → `namespace/name` (or name) → object."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        self.connections: dict[str, Connection] = {}

    def add_cluster(self, name: str, role: str, server: str = "") -> None:
        self.connections.setdefault(name, Connection(role, server))
        self.objects.setdefault(name, {})

    def put(self, cluster: str, kind: str, obj: Mapping[str, Any]) -> None:
        self.objects.setdefault(cluster, {}).setdefault(kind, {})[object_key(obj)] = dict(obj)

    def delete(self, cluster: str, kind: str, obj: Mapping[str, Any]) -> None:
        self.objects.get(cluster, {}).get(kind, {}).pop(object_key(obj), None)

    def get(self, cluster: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        key = f"{namespace}/{name}" if namespace else name
        return self.objects.get(cluster, {}).get(kind, {}).get(key)

    def of(self, cluster: str, kind: str) -> list[dict[str, Any]]:
        return list(self.objects.get(cluster, {}).get(kind, {}).values())

    def members(self) -> list[str]:
        return sorted(c for c, conn in self.connections.items() if conn.role != BROKER_ROLE)

    def brokers(self) -> list[str]:
        return sorted(c for c, conn in self.connections.items() if conn.role == BROKER_ROLE)


# --- small readers of plain objects -------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def object_key(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name") or "")


def _ns(obj: Mapping[str, Any]) -> str | None:
    ns = _meta(obj).get("namespace")
    return str(ns) if ns else None


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def conditions(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`status.conditions` as type, status, reason, message (what the page prints)."""
    out = []
    for c in _status(obj).get("conditions") or []:
        if isinstance(c, Mapping):
            out.append({k: c.get(k) or "" for k in ("type", "status", "reason", "message", "lastTransitionTime")})
    return out


def _condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions(obj) if c["type"] == type_), None)


OK, WARN, BAD, NEUTRAL = "ok", "warn", "bad", ""


def badge(text: str, level: str, title: str = "") -> dict[str, str]:
    """A coloured label the page shows as is: `level` is ok (green), warn, bad (red) or "" (grey)."""
    return {"text": text, "level": level, "title": title}


def export_badge(obj: Mapping[str, Any]) -> dict[str, str]:
    """What an exporter wears: a conflict or an invalid export first (its Ready may still be True:
    the export is served, under the oldest exporter's terms), else its Ready condition."""
    conflict, valid, ready = _condition(obj, "Conflict"), _condition(obj, "Valid"), _condition(obj, "Ready")
    if conflict is not None and conflict["status"] == "True":
        return badge(f"Conflict ({conflict['reason']})" if conflict["reason"] else "Conflict", BAD,
                     conflict["message"])
    if valid is not None and valid["status"] == "False":
        return badge("Invalid", BAD, valid["message"] or valid["reason"])
    if ready is None:
        return badge("Pending", NEUTRAL, "no Ready condition yet")
    return badge(f"Ready {ready['status']}", OK if ready["status"] == "True" else WARN,
                 ready["message"] or ready["reason"])


def ref(cluster: str, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the page sends back to ask for one object's YAML and Events."""
    return {"cluster": cluster, "kind": kind, "namespace": _ns(obj), "name": _name(obj)}


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _ports(ports: Iterable[Mapping[str, Any]] | None) -> list[str]:
    out = []
    for p in ports or []:
        name = f"{p['name']}:" if p.get("name") else ""
        out.append(f"{name}{p.get('port')}/{p.get('protocol') or 'TCP'}")
    return out


# --- clusters -----------------------------------------------------------------------------------


def _parts(store: Store, cluster: str) -> list[dict[str, Any]]:
    """The Isthmus Deployments of a cluster and their readiness (pods' restarts beside)."""
    restarts: dict[str, int] = {}
    for pod in store.of(cluster, "Pod"):
        owner = _pod_deployment(pod)
        for cs in _status(pod).get("containerStatuses") or []:
            restarts[owner] = restarts.get(owner, 0) + int(cs.get("restartCount") or 0)
    parts = []
    for d in sorted(store.of(cluster, "Deployment"), key=_name):
        replicas = _spec(d).get("replicas")
        want = int(replicas) if replicas is not None else 1
        ready = int(_status(d).get("readyReplicas") or 0)
        parts.append({"name": _name(d), "ready": ready, "replicas": want, "ok": ready >= want,
                      "restarts": restarts.get(_name(d), 0), "ref": ref(cluster, "Deployment", d)})
    return parts


def _pod_deployment(pod: Mapping[str, Any]) -> str:
    """A Deployment's pod is named <deployment>-<replicaset hash>-<pod hash>."""
    name = _name(pod)
    return name.rsplit("-", 2)[0] if name.count("-") >= 2 else name


def heartbeat_age(heartbeat: str | None, now: datetime) -> float | None:
    t = parse_time(heartbeat)
    return None if t is None else max(0.0, (now - t).total_seconds())


def cluster_health(item: Mapping[str, Any], now: datetime) -> str:
    """healthy / unhealthy / unreachable for a cluster item at `now` (the page does the same in JS)."""
    if item.get("error"):
        return UNREACHABLE
    if not item.get("synced"):
        return UNKNOWN
    if item.get("problems"):
        return UNHEALTHY
    if item.get("role") != BROKER_ROLE and item.get("brokerWatched"):
        age = heartbeat_age(item.get("heartbeat"), now)
        if age is None or age > float(item.get("staleAfter") or STALE_HEARTBEAT_SECONDS):
            return UNHEALTHY
    return HEALTHY


def _clusters(store: Store) -> dict[str, dict[str, Any]]:
    registered: dict[str, tuple[str, dict[str, Any]]] = {}
    for broker in store.brokers():
        for c in store.of(broker, "Cluster"):
            registered.setdefault(_name(c), (broker, c))
    out: dict[str, dict[str, Any]] = {}
    names = set(store.connections) | set(registered)
    for name in sorted(names):
        conn = store.connections.get(name)
        role = conn.role if conn is not None else "member"
        parts = _parts(store, name)
        problems = [f"{p['name']}: {p['ready']}/{p['replicas']} ready" for p in parts if not p["ok"]]
        item: dict[str, Any] = {
            "name": name, "role": role, "server": conn.server if conn else "",
            "watched": conn is not None,
            "error": conn.error if conn else None, "synced": conn.synced if conn else True,
            "kindErrors": dict(conn.kind_errors) if conn else {},
            "parts": parts, "staleAfter": STALE_HEARTBEAT_SECONDS,
            "brokerWatched": bool(store.brokers()),
        }
        if role != BROKER_ROLE:
            found = registered.get(name)
            obj = found[1] if found else None
            item["joined"] = obj is not None
            item["heartbeat"] = (_meta(obj).get("annotations") or {}).get(HEARTBEAT_ANNOTATION) if obj else None
            item["cidrs"] = list(_spec(obj).get("clustersetIPCIDR") or []) if obj else []
            item["joinedAt"] = _spec(obj).get("joinedAt") if obj else None
            ready = _condition(obj, "Ready") if obj else None
            item["ready"] = ready
            item["ref"] = ref(found[0], "Cluster", obj) if found and obj else None
            if store.brokers() and obj is None:
                problems.append("not registered on the broker (not joined, or left)")
            if ready is not None and ready["status"] != "True":
                problems.append(f"Ready {ready['status']} {ready['reason']}: {ready['message']}".rstrip(": "))
        item["problems"] = problems
        out[name] = item
    return out


# --- services -----------------------------------------------------------------------------------


def _services(store: Store) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}

    def entry(ns: str, name: str) -> dict[str, Any]:
        key = f"{ns}/{name}"
        if key not in out:
            out[key] = {"namespace": ns, "name": name, "exporters": {}, "importers": {}, "conflicts": [],
                        "vip": [], "ports": [], "type": ""}
        return out[key]

    for cluster in store.members():
        for se in store.of(cluster, "ServiceExport"):
            e = entry(_ns(se) or "", _name(se))
            conds = conditions(se)
            conflict = _condition(se, "Conflict")
            valid = _condition(se, "Valid")
            problems = []
            if conflict is not None and conflict["status"] == "True":
                text = conflict["message"] or conflict["reason"]
                problems.append(f"conflict: {text}")
                e["conflicts"].append({"cluster": cluster, "reason": conflict["reason"], "message": text})
            if valid is not None and valid["status"] == "False":
                problems.append(f"not valid: {valid['message'] or valid['reason']}")
            e["exporters"][cluster] = {"conditions": conds, "problems": problems, "badge": export_badge(se),
                                       "ref": ref(cluster, "ServiceExport", se)}
        slices: dict[tuple[str, str], dict[str, list[str]]] = {}
        for sl in store.of(cluster, "EndpointSlice"):
            svc = mcs_service_name(_labels(sl))
            if svc is None:
                continue
            source = _labels(sl).get(SOURCE_CLUSTER_LABEL) or "?"
            addrs = slices.setdefault((_ns(sl) or "", svc), {}).setdefault(source, [])
            for ep in sl.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready") is False:
                    continue
                addrs.extend(ep.get("addresses") or [])
        for si in store.of(cluster, "ServiceImport"):
            e = entry(_ns(si) or "", _name(si))
            spec = _spec(si)
            eps = slices.get((_ns(si) or "", _name(si)), {})
            imp: dict[str, Any] = {
                "vip": list(spec.get("ips") or []), "ipFamilies": list(spec.get("ipFamilies") or []),
                "type": spec.get("type") or "",
                "ports": _ports(spec.get("ports")),
                "clusters": [c.get("cluster") for c in _status(si).get("clusters") or []],
                "endpoints": {src: sorted(a) for src, a in sorted(eps.items())},
                "ready": _condition(si, "Ready"),
                "ref": ref(cluster, "ServiceImport", si)}
            e["importers"][cluster] = imp
            # Every VIP any importer shows (both of a dual-stack service), IPv4 before IPv6, so the page
            # reads the same whatever order the importers were seen in.
            e["vip"] = sorted(set(e["vip"]) | set(imp["vip"]), key=lambda ip: (":" in ip, ip))
            e["ipFamilies"] = e.get("ipFamilies") or imp["ipFamilies"]
            e["type"] = e["type"] or imp["type"]
            e["ports"] = e["ports"] or imp["ports"]
    for e in out.values():
        e["labels"] = {SERVICE_NAME_LABEL: e["name"]}
        e["clusters"] = sorted(set(e["exporters"]) | set(e["importers"]))
        e["ref"] = _service_ref(e)
    return out


def _service_ref(e: Mapping[str, Any]) -> dict[str, Any] | None:
    """What clicking a service opens: the export whose conditions explain a problem (in conflict,
    then any other problem), else an import, else an export. A ServiceImport has no conditions."""
    exporters: Mapping[str, Any] = e["exporters"]
    in_conflict = [c for c in sorted(exporters) if any(p.startswith("conflict") for p in exporters[c]["problems"])]
    with_problems = [c for c in sorted(exporters) if exporters[c]["problems"]]
    for cluster in (*in_conflict, *with_problems):
        return dict(exporters[cluster]["ref"])
    for side in (e["importers"], exporters):
        if side:
            return dict(side[sorted(side)[0]]["ref"])
    return None


def related_conditions(store: Store, kind: str, namespace: str | None, name: str) -> list[dict[str, Any]]:
    """For an object whose state is told by others' conditions (a ServiceImport: its exports'), those
    conditions with the cluster and object they are on; [] for any other kind."""
    if kind != "ServiceImport" or not namespace:
        return []
    out = []
    for cluster in store.members():
        se = store.get(cluster, "ServiceExport", namespace, name)
        if se is not None:
            out.append({"ref": ref(cluster, "ServiceExport", se), "badge": export_badge(se),
                        "conditions": conditions(se)})
    return out


# --- exposure, load balancing, egress -----------------------------------------------------------


def _cluster_names(sel: Iterable[Mapping[str, Any]] | None) -> list[str]:
    return [str(s.get("name")) for s in sel or [] if s.get("name")]


def _mcs(store: Store) -> dict[str, dict[str, Any]]:
    out = {}
    for cluster in sorted(store.connections):
        for m in store.of(cluster, "MultiClusterService"):
            spec, status = _spec(m), _status(m)
            ingress = ((status.get("loadBalancer") or {}).get("ingress")) or []
            address = status.get("address") or ", ".join(i.get("ip") or i.get("hostname") or "" for i in ingress)
            out[f"{cluster}/{object_key(m)}"] = {
                "cluster": cluster, "namespace": _ns(m), "name": _name(m), "types": list(spec.get("types") or []),
                "providers": status.get("providers") or ", ".join(_cluster_names(spec.get("providerClusters")))
                or "all",
                "consumers": status.get("consumers") or ", ".join(_cluster_names(spec.get("consumerClusters")))
                or "all",
                "address": address or "", "conditions": conditions(m),
                "reports": [{k: r.get(k) for k in ("name", "provider", "consumer", "reason", "message",
                                                   "readyEndpoints", "imported")}
                            for r in status.get("clusters") or []],
                "ref": ref(cluster, "MultiClusterService", m),
            }
    return out


def role_label(role: Any) -> str:
    """dklb's pool role in words: `slave_public` (DC/OS's public agents) is public, any other role
    (`*`, `slave`, ...) listens on the private address. The raw value goes beside it, as a tooltip."""
    return "public" if (role or PUBLIC_ROLE) == PUBLIC_ROLE else "private"


def _pools(store: Store) -> dict[str, dict[str, Any]]:
    out = {}
    for cluster in sorted(store.connections):
        for p in store.of(cluster, "LoadBalancerPool"):
            spec, status = _spec(p), _status(p)
            haproxy = spec.get("haproxy") or {}
            addrs: dict[str, list[str]] = {}
            for f in status.get("frontends") or []:
                addrs[str(f.get("name"))] = [*(f.get("publicAddresses") or []), *(f.get("privateAddresses") or [])]
            out[f"{cluster}/{_name(p)}"] = {
                "cluster": cluster, "name": _name(p), "role": role_label(spec.get("role")), "roleRaw": spec.get("role") or "",
                "count": spec.get("count"),
                "ready": status.get("ready") or "", "addresses": status.get("addresses") or "",
                "statsPort": (haproxy.get("stats") or {}).get("bindPort"),
                "frontends": [{"name": f.get("name"), "port": f.get("bindPort"), "protocol": f.get("protocol"),
                               "backend": (f.get("linkBackend") or {}).get("defaultBackend"),
                               "addresses": addrs.get(str(f.get("name")), [])}
                              for f in haproxy.get("frontends") or []],
                "backends": [{"name": b.get("name"), "protocol": b.get("protocol"),
                              "servers": [f"{s.get('address')}:{s.get('port')}" for s in b.get("servers") or []]}
                             for b in haproxy.get("backends") or []],
                "instances": [{k: i.get(k) for k in ("slot", "state", "pid", "restarts", "publicAddress",
                                                     "privateAddress", "statsPort", "message")}
                              for i in status.get("instances") or []],
                "conditions": conditions(p), "ref": ref(cluster, "LoadBalancerPool", p),
            }
    return out


def _egress(store: Store) -> dict[str, dict[str, Any]]:
    out = {}
    for cluster in store.members():
        for kind in EGRESS_KINDS:
            for o in store.of(cluster, kind):
                spec, status = _spec(o), _status(o)
                item: dict[str, Any] = {"cluster": cluster, "kind": kind, "namespace": _ns(o), "name": _name(o),
                                        "conditions": conditions(o), "ref": ref(cluster, kind, o)}
                if kind == "SourceIPClass":
                    item["detail"] = ", ".join(f"{r.get('start')}-{r.get('end')}" for r in spec.get("ranges") or [])
                    item["state"] = f"{status.get('allocated') or 0}/{status.get('capacity') or '?'} allocated"
                elif kind == "SourceIPClaim":
                    item["detail"] = f"class {spec.get('sourceIPClassName')}"
                    item["state"] = status.get("phase") or ""
                    item["sourceIP"] = status.get("sourceIP") or ""
                elif kind == "SourceIP":
                    claim = spec.get("claimRef") or {}
                    item["detail"] = f"claim {claim.get('namespace')}/{claim.get('name')}" if claim else "unbound"
                    item["state"] = status.get("phase") or ""
                    item["sourceIP"] = spec.get("sourceIP") or ""
                elif kind == "ExternalService":
                    item["detail"] = f"{spec.get('targetIP')} {' '.join(_ports(spec.get('ports')))}"
                    ready = _condition(o, "Ready")
                    item["state"] = f"Ready {ready['status']}" if ready else ""
                    item["sourceIP"] = status.get("sourceIPs") or ""
                    item["sources"] = [{k: s.get(k) for k in ("service", "claim", "sourceIP", "endpoints")}
                                       for s in status.get("sources") or []]
                else:  # Gateway
                    es = spec.get("externalService") or {}
                    item["detail"] = f"for {es.get('namespace')}/{es.get('name')}"
                    item["state"] = f"holder {status.get('holder')}" if status.get("holder") else ""
                    item["sourceIP"] = ", ".join(sorted({r.get("sourceIP") for r in spec.get("egressRules") or []
                                                         if r.get("sourceIP")}))
                item["badge"] = _egress_badge(kind, o, item.get("state") or "")
                out[f"{cluster}/{kind}/{object_key(o)}"] = item
    return out


_PHASE_LEVELS = {
    "SourceIPClaim": {"Bound": OK, "Pending": WARN, "Lost": BAD},
    "SourceIP": {"Bound": OK, "Available": OK, "Released": WARN, "Failed": BAD},
}


def _egress_badge(kind: str, obj: Mapping[str, Any], state: str) -> dict[str, str]:
    """The State column's badge: a claim's or SourceIP's phase, the Ready condition of the others
    (a Gateway: whether a replica holds it)."""
    ready = _condition(obj, "Ready")
    why = ready["message"] or ready["reason"] if ready else ""
    if kind in _PHASE_LEVELS:
        phase = str(_status(obj).get("phase") or "")
        if not phase:
            return badge("Pending" if kind == "SourceIPClaim" else "-", NEUTRAL, why)
        return badge(phase, _PHASE_LEVELS[kind].get(phase, NEUTRAL), why)
    if kind == "Gateway":
        holder = _status(obj).get("holder")
        return badge("held" if holder else "no holder", OK if holder else WARN, state)
    if ready is None:
        return badge("-", NEUTRAL, "no Ready condition yet")
    if ready["status"] == "True":
        return badge("Ready", OK, why)
    return badge(ready["reason"] or f"Ready {ready['status']}", BAD if ready["status"] == "False" else WARN, why)


def build_view(store: Store) -> dict[str, dict[str, dict[str, Any]]]:
    """Every section of the page from the objects in `store`."""
    return {"clusters": _clusters(store), "services": _services(store), "mcs": _mcs(store),
            "pools": _pools(store), "egress": _egress(store)}


def diff(old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """`{"set": {section: {id: item}}, "del": {section: [id]}}` turning `old` into `new`; None if equal."""
    sets: dict[str, dict[str, Any]] = {}
    dels: dict[str, list[str]] = {}
    for section in SECTIONS:
        before, after = old.get(section, {}), new.get(section, {})
        changed = {k: v for k, v in after.items() if before.get(k) != v}
        gone = sorted(k for k in before if k not in after)
        if changed:
            sets[section] = changed
        if gone:
            dels[section] = gone
    if not sets and not dels:
        return None
    return {"set": sets, "del": dels}


def apply_delta(view: dict[str, dict[str, Any]], delta: Mapping[str, Any]) -> None:
    """What the page does with a delta (kept here so tests can check `diff` round-trips)."""
    for section, items in delta.get("set", {}).items():
        view.setdefault(section, {}).update(items)
    for section, ids in delta.get("del", {}).items():
        for i in ids:
            view.get(section, {}).pop(i, None)
