"""`isthmus show` for kinds that live on the broker (MultiClusterServices), against real embedded
apiservers: a broker and a joined member. From the member's context, `show mcs` reads the broker
(through the kubeconfig's broker context, else with the member's own broker credentials); an empty
answer says where it looked; a context outside any clusterset says so."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from isthmus.api.mcsvc import MultiClusterService
from isthmus.kube.resources import resource_for
from tests.harness.clusterset import ClusterSet

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]


def write_kubeconfig(path: Path, servers: dict[str, Any], current: str) -> Path:
    """One kubeconfig with a context per server (each the server's admin), as a user merges them."""
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": [],
                           "current-context": current}
    for name, srv in servers.items():
        one = srv.server.kubeconfig(name)
        for section in ("clusters", "users", "contexts"):
            for entry in one[section]:
                entry["name"] = name
                if section == "contexts":
                    entry["context"]["cluster"] = entry["context"]["user"] = name
                doc[section].append(entry)
    path.write_text(yaml.safe_dump(doc))
    return path


async def isthmus(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": "", "COLUMNS": "200"})
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("show"), n=1, start_agents=False) as cs:
        yield cs


async def test_show_mcs_from_a_member_reads_the_broker(cs: ClusterSet, tmp_path: Path) -> None:
    assert cs.broker is not None
    both = write_kubeconfig(tmp_path / "both", {"c1": cs.clusters[0].server, "broker": cs.broker}, "c1")
    member_only = write_kubeconfig(tmp_path / "member", {"c1": cs.clusters[0].server}, "c1")
    # Nothing exposed yet: the message says where it looked, the broker, not c1.
    code, out, err = await isthmus("show", "mcs", "-A", "--kubeconfig", str(both))
    assert code == 0 and out == "", (out, err)
    assert err.strip() == "no multiclusterservices in any namespace on the broker (context broker)"

    await cs.broker_client.create(Namespace(metadata=ObjectMeta(name="shop")))
    res: Any = resource_for(MultiClusterService)
    await cs.broker_client.create(res.from_dict({
        "apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": "cart", "namespace": "shop"}, "spec": {"types": ["CrossCluster"]}}))

    for kubeconfig in (both, member_only):  # the broker's own context, else c1's broker credentials
        code, out, err = await isthmus("show", "mcs", "-A", "--kubeconfig", str(kubeconfig))
        assert code == 0, err
        rows = [line.split() for line in out.splitlines()]
        assert rows[0][:3] == ["NAMESPACE", "NAME", "TYPES"] and rows[1][:3] == ["shop", "cart", "CrossCluster"], out
    code, out, _ = await isthmus("show", "mcs", "-n", "shop", "--kubeconfig", str(both), "--context", "broker")
    assert code == 0 and "cart" in out
    code, out, err = await isthmus("show", "mcs", "-n", "other", "--kubeconfig", str(member_only))
    assert code == 0 and err.strip().startswith("no multiclusterservices in namespace other on the broker at "), err


async def test_show_mcs_outside_a_clusterset_says_so(cs: ClusterSet, tmp_path: Path) -> None:
    lone, _ = await cs.spare_server("lone")
    kubeconfig = write_kubeconfig(tmp_path / "lone", {"lone": lone}, "lone")
    code, out, err = await isthmus("show", "mcs", "-A", "--kubeconfig", str(kubeconfig))
    assert code == 0 and out == ""
    assert err.strip() == ("no multiclusterservices in any namespace in context lone, which is neither a member "
                           "nor the broker of a clusterset (pass the broker's --context)")


async def test_expose_from_a_member_writes_on_its_broker(cs: ClusterSet, tmp_path: Path) -> None:
    assert cs.broker is not None
    both = write_kubeconfig(tmp_path / "both", {"c1": cs.clusters[0].server, "broker": cs.broker}, "c1")
    member_only = write_kubeconfig(tmp_path / "member", {"c1": cs.clusters[0].server}, "c1")
    code, out, err = await isthmus("expose", "web", "-n", "shop", "--kubeconfig", str(both))
    assert code == 0, err
    assert out.strip() == "multiclusterservice shop/web created on the broker (context broker)"
    res: Any = resource_for(MultiClusterService)
    assert (await cs.broker_client.get(res, "web", namespace="shop")).metadata.name == "web"
    code, out, err = await isthmus("expose", "web", "-n", "shop", "--kubeconfig", str(both), "--context", "broker")
    assert code == 0 and out.strip() == "multiclusterservice shop/web unchanged", err
    # Only the broker admin writes MultiClusterServices: a member's own credentials are not used for it.
    code, out, err = await isthmus("expose", "web", "-n", "shop", "--kubeconfig", str(member_only))
    assert code == 2 and out == ""
    assert err.startswith("error: context c1 is a member of the clusterset whose broker is ") and \
        "pass the broker's --kubeconfig or --context" in err, err
