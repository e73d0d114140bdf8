"""The `default/kubernetes` Service and endpoints follow the apiserver across restarts."""

from __future__ import annotations

from pathlib import Path

from isthmus.apiserver.server import ApiServer
from tests.harness.ports import free_port


def endpoints(srv: ApiServer) -> tuple[object, object, object]:
    svc = srv.store.get("/services", "default", "kubernetes")
    ep = srv.store.get("/endpoints", "default", "kubernetes")
    eps = srv.store.get("discovery.k8s.io/endpointslices", "default", "kubernetes")
    assert svc is not None and ep is not None and eps is not None
    return svc["spec"]["ports"][0]["targetPort"], ep["subsets"][0]["ports"][0]["port"], eps["ports"][0]["port"]


async def test_restart_on_another_port_moves_the_endpoints(tmp_path: Path) -> None:
    first, second = free_port(), free_port()
    srv = ApiServer(data_dir=tmp_path / "data", token="t", port=first)
    await srv.start()
    try:
        assert endpoints(srv) == (first, first, first)
        uid = srv.store.get("/services", "default", "kubernetes")["metadata"]["uid"]
    finally:
        await srv.stop()
    srv = ApiServer(data_dir=tmp_path / "data", token="t", port=second)
    await srv.start()
    try:
        assert endpoints(srv) == (second, second, second)
        # The same Service, its port updated (kube resets the ports of the one it has).
        assert srv.store.get("/services", "default", "kubernetes")["metadata"]["uid"] == uid
    finally:
        await srv.stop()


async def test_advertised_address(tmp_path: Path) -> None:
    srv = ApiServer(host="127.0.0.1", advertise_address="127.0.0.9")
    await srv.start()
    try:
        ep = srv.store.get("/endpoints", "default", "kubernetes")
        assert ep is not None and ep["subsets"][0]["addresses"] == [{"ip": "127.0.0.9"}]
    finally:
        await srv.stop()
