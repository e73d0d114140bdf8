"""What `isthmus show pools|loadbalancers` prints, computed from API objects only (pure): pools with
their frontends, backends and instances, and each Service/Ingress with its pool, addresses, health
and the last thing that went wrong — who owns each part is read from its name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from isthmus.api.lb import (
    DKLB_CONFIG_ANNOTATION,
    EDGELB_CONTROLLER,
    READY,
    ConfigError,
    LoadBalancerPool,
    Owner,
    backend_owner,
    frontend_owner,
    parse_ingress_config,
    parse_service_config,
)


def shown_service(svc: Mapping[str, Any]) -> bool:
    """Whether `show loadbalancers` lists a Service: ours by class, or class-less and carrying the
    config annotation (which our webhook writes into every class-less one when the admin opted in;
    the command cannot know the translator's flag). Another class's Service is never listed."""
    spec = svc.get("spec") or {}
    if spec.get("type") != "LoadBalancer":
        return False
    cls = spec.get("loadBalancerClass")
    annotations = (svc.get("metadata") or {}).get("annotations") or {}
    return bool(cls == EDGELB_CONTROLLER or (cls is None and DKLB_CONFIG_ANNOTATION in annotations))


def _owner_text(owner: Owner | None) -> str:
    return f"{owner.kind}/{owner.namespace}/{owner.name}" if owner else "-"


def pool_rows(pools: Iterable[Mapping[str, Any]], namespace: str | None = None) -> list[dict[str, Any]]:
    """One document per pool; with `namespace`, only pools with a part owned there."""
    rows = []
    for raw in pools:
        pool = LoadBalancerPool.from_dict(raw)
        real = {f.name: f.port for f in pool.status.frontends}
        frontends = [{"name": f.name, "port": real.get(f.name, f.bind_port), "protocol": f.protocol,
                      "owner": _owner_text(frontend_owner(f.name)),
                      "rules": len(f.link_backend.map), "defaultBackend": f.link_backend.default_backend or ""}
                     for f in pool.spec.haproxy.frontends]  # fmt: skip
        backends = [{"name": b.name, "servers": [f"{s.address}:{s.port}" for s in b.servers],
                     "owner": _owner_text(backend_owner(b.name))} for b in pool.spec.haproxy.backends]  # fmt: skip
        owners = [frontend_owner(f.name) for f in pool.spec.haproxy.frontends]
        owners += [backend_owner(b.name) for b in pool.spec.haproxy.backends]
        if namespace is not None and not any(o is not None and o.namespace == namespace for o in owners):
            continue
        ready = next((c for c in pool.status.conditions if c.type == READY), None)
        rows.append({
            "name": pool.name, "role": pool.spec.role, "size": pool.spec.count,
            "ready": pool.status.ready or f"0/{pool.spec.count}",
            "healthy": ready is not None and ready.status == "True",
            "message": ready.message if ready is not None else "no status yet: no pool manager has seen it",
            "addresses": [a for a in pool.status.addresses.split(",") if a],
            "statsPorts": sorted({i.stats_port for i in pool.status.instances if i.stats_port}),
            "instances": [{"slot": i.slot, "state": i.state.value, "holder": i.holder, "pid": i.pid,
                           "restarts": i.restarts, "message": i.message} for i in pool.status.instances],
            "frontends": frontends, "backends": backends,
            "created": pool.metadata.creation_timestamp.isoformat() if pool.metadata.creation_timestamp else None,
        })  # fmt: skip
    return rows


def load_balancer_rows(
    objects: Iterable[tuple[str, Mapping[str, Any]]],
    pools: Iterable[Mapping[str, Any]],
    warnings: Mapping[tuple[str, str, str], str],
) -> list[dict[str, Any]]:
    """One document per (kind, object): its pool (the one holding its parts, else the one its config
    names), addresses, the pool's health, the config problem if any, and its last Warning."""
    by_owner: dict[tuple[str, str, str], LoadBalancerPool] = {}
    for raw in pools:
        pool = LoadBalancerPool.from_dict(raw)
        for name in [f.name for f in pool.spec.haproxy.frontends] + [b.name for b in pool.spec.haproxy.backends]:
            owner = frontend_owner(name) or backend_owner(name)
            if owner is not None:
                by_owner.setdefault((owner.kind, owner.namespace, owner.name), pool)
    rows = []
    for kind, obj in objects:
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        annotations = meta.get("annotations") or {}
        problem = ""
        configured = None
        try:
            cfg = parse_service_config(annotations) if kind == "Service" else parse_ingress_config(annotations)
            configured = cfg.name
        except ConfigError as e:
            problem = str(e)
        found = by_owner.get((kind, ns, name))
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        addresses = []
        for entry in ingress:
            where = entry.get("hostname") or entry.get("ip") or ""
            ports = [str(p["port"]) + ("!" if p.get("error") else "") for p in entry.get("ports") or []]
            addresses.append(f"{where}:{','.join(ports)}" if ports else where)
        healthy = None
        if found is not None:
            ready = next((c for c in found.status.conditions if c.type == READY), None)
            healthy = ready is not None and ready.status == "True"
        rows.append({
            "kind": kind, "namespace": ns, "name": name,
            "pool": found.name if found is not None else (configured or ""),
            "poolReady": found.status.ready if found is not None else "",
            "healthy": healthy, "addresses": addresses,
            "configured": DKLB_CONFIG_ANNOTATION in annotations, "problem": problem,
            # The last Warning matters while the object is not served; once it is, it is history.
            "lastWarning": warnings.get((kind, ns, name), "") if not (addresses and healthy) else "",
        })  # fmt: skip
    return rows
