"""`isthmus show pools|loadbalancers`: the views (pure) and how `show` finds them. The examples'
configs are checked in test_lb_translate.py."""

from __future__ import annotations

from typing import Any

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION
from isthmus.lb.views import load_balancer_rows, pool_rows, shown_service


def _pool(name: str, frontends: list[dict[str, Any]], backends: list[dict[str, Any]],
          ready: bool | None = None) -> dict[str, Any]:  # fmt: skip
    status: dict[str, Any] = {}
    if ready is not None:
        status = {"ready": "1/1" if ready else "0/1", "addresses": "127.0.0.1" if ready else "",
                  "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                  "reason": "Serving" if ready else "Failed",
                                  "message": "" if ready else "haproxy -c rejected the config",
                                  "lastTransitionTime": "2026-01-01T00:00:00Z"}]}  # fmt: skip
    return {"apiVersion": "isthmus.io/v1alpha1", "kind": "LoadBalancerPool",
            "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"role": "*", "count": 1, "haproxy": {"frontends": frontends, "backends": backends}},
            "status": status}  # fmt: skip


SHOP = _pool(
    "a--shop--web",
    [{"name": "a:shop:web:80", "bindPort": 8080, "protocol": "TCP",
      "linkBackend": {"defaultBackend": "a:shop:web:80"}}],
    [{"name": "a:shop:web:80", "servers": [{"address": "127.0.1.1", "port": 8080},
                                           {"address": "127.0.1.2", "port": 8080}]}],
    ready=True,
)  # fmt: skip
BROKEN = _pool(
    "a--blog--site",
    [{"name": "a:blog:site", "bindPort": 0, "protocol": "HTTP",
      "linkBackend": {"map": [{"backend": "a:blog:site:web:80", "hostEq": "x.example"}]}}],
    [{"name": "a:blog:site:web:80", "protocol": "HTTP"}],
    ready=False,
)  # fmt: skip


def test_pool_rows_show_parts_with_owners_ports_and_servers() -> None:
    rows = pool_rows([SHOP, BROKEN])
    shop = next(r for r in rows if r["name"] == "a--shop--web")
    assert shop["ready"] == "1/1" and shop["healthy"] and shop["addresses"] == ["127.0.0.1"]
    assert shop["frontends"][0]["owner"] == "Service/shop/web" and shop["frontends"][0]["port"] == 8080
    assert shop["backends"][0]["servers"] == ["127.0.1.1:8080", "127.0.1.2:8080"]
    broken = next(r for r in rows if r["name"] == "a--blog--site")
    assert not broken["healthy"] and broken["message"] == "haproxy -c rejected the config"
    assert broken["frontends"][0]["owner"] == "Ingress/blog/site" and broken["frontends"][0]["rules"] == 1
    assert broken["backends"][0]["owner"] == "Ingress/blog/site" and broken["backends"][0]["servers"] == []


def test_pool_rows_namespace_keeps_pools_with_a_part_owned_there() -> None:
    assert [r["name"] for r in pool_rows([SHOP, BROKEN], "blog")] == ["a--blog--site"]
    assert pool_rows([SHOP, BROKEN], "nowhere") == []


def test_pool_without_status_says_no_pool_manager_saw_it() -> None:
    (row,) = pool_rows([_pool("p", [], [])])
    assert row["ready"] == "0/1" and not row["healthy"] and "no pool manager" in row["message"]


def _svc(
    ns: str, name: str, config: str | None, ingress: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    ann = {DKLB_CONFIG_ANNOTATION: config} if config is not None else {}
    return {"metadata": {"namespace": ns, "name": name, "annotations": ann},
            "spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": ingress or []}}}  # fmt: skip


def test_load_balancer_rows_find_the_pool_holding_the_objects_parts() -> None:
    svc = _svc("shop", "web", None, [{"ip": "127.0.0.1", "ports": [{"port": 8080, "protocol": "TCP"}]}])
    ing = {"metadata": {"namespace": "blog", "name": "site"}}
    rows = load_balancer_rows([("Service", svc), ("Ingress", ing)], [SHOP, BROKEN],
                              {("Ingress", "blog", "site"): "PoolFailed: haproxy -c rejected the config"})  # fmt: skip
    web, site = rows
    assert (web["pool"], web["healthy"], web["addresses"], web["problem"]) == ("a--shop--web", True,
                                                                               ["127.0.0.1:8080"], "")  # fmt: skip
    assert (site["pool"], site["healthy"]) == ("a--blog--site", False)
    assert site["lastWarning"] == "PoolFailed: haproxy -c rejected the config"


def test_load_balancer_rows_report_a_config_that_does_not_parse() -> None:
    (row,) = load_balancer_rows([("Service", _svc("shop", "bad", "role: [unclosed"))], [], {})
    assert row["configured"] and row["problem"] and row["pool"] == "" and row["healthy"] is None


def test_load_balancer_rows_name_the_configured_pool_before_it_exists() -> None:
    (row,) = load_balancer_rows([("Service", _svc("shop", "x", 'name: shared\nrole: "*"\n'))], [], {})
    assert row["pool"] == "shared" and row["problem"] == ""


def test_show_dispatch_keeps_discovery_free_of_load_balancing() -> None:
    """`isthmus show` lists lb things through the cli.show registry: discovery's CLI module imports no
    lb code, and the full CLI offers pools and loadbalancers."""
    import subprocess
    import sys

    code = (
        "import sys, isthmus.cli.discovery; "
        "assert not any(m == 'isthmus.lb' or m.startswith(('isthmus.lb.', 'isthmus.cli.lb')) for m in sys.modules), "
        "sorted(m for m in sys.modules if 'lb' in m); "
        "import isthmus.cli.main; from isthmus.cli.show import SHOWS; print(sorted(SHOWS))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["['egress',", "'loadbalancers',", "'mcs',", "'pools']"]


def test_show_lists_our_services_only() -> None:
    def svc(cls: str | None, annotated: bool) -> dict[str, Any]:
        meta = {"annotations": {DKLB_CONFIG_ANNOTATION: ""}} if annotated else {}
        return {"metadata": meta, "spec": {"type": "LoadBalancer", **({"loadBalancerClass": cls} if cls else {})}}

    assert shown_service(svc("isthmus.io/edgelb", False))
    assert shown_service(svc(None, True))  # the opted-in webhook wrote its config
    assert not shown_service(svc(None, False))  # another load balancer's
    assert not shown_service(svc("io.cilium/l2-announcer", True))
