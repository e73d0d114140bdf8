"""ensure/remove_coredns_stub on ConfigMap kube-system/coredns of a real (embedded) apiserver."""

from __future__ import annotations

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from isthmus.kube.coredns import ensure_coredns_stub, remove_coredns_stub
from tests.harness.apiserver import RunningApiServer
from tests.unit.test_coredns import KUBEADM


async def test_stub_zone_round_trip(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    await client.create(ConfigMap(metadata=ObjectMeta(name="coredns", namespace="kube-system"),
                                  data={"Corefile": KUBEADM, "other": "kept"}))
    assert await ensure_coredns_stub(client, "clusterset.local", ["10.96.0.53"]) is None
    cm = await client.get(ConfigMap, "coredns", namespace="kube-system")
    assert "forward . 10.96.0.53:53" in cm.data["Corefile"] and cm.data["other"] == "kept"
    rv = cm.metadata.resourceVersion
    assert await ensure_coredns_stub(client, "clusterset.local", ["10.96.0.53"]) is None
    cm = await client.get(ConfigMap, "coredns", namespace="kube-system")
    assert cm.metadata.resourceVersion == rv  # nothing to change: no write
    assert await ensure_coredns_stub(client, "clusterset.local", ["10.96.0.99"]) is None
    cm = await client.get(ConfigMap, "coredns", namespace="kube-system")
    assert "10.96.0.99:53" in cm.data["Corefile"] and "10.96.0.53" not in cm.data["Corefile"]
    assert await remove_coredns_stub(client, "clusterset.local") is None
    cm = await client.get(ConfigMap, "coredns", namespace="kube-system")
    assert cm.data == {"Corefile": KUBEADM, "other": "kept"}
    assert await remove_coredns_stub(client, "clusterset.local") is None


async def test_no_coredns_configmap_is_skipped_with_a_reason(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    note = await ensure_coredns_stub(client, "clusterset.local", ["10.96.0.53"])
    assert note is not None and "no ConfigMap kube-system/coredns" in note
    await client.create(ConfigMap(metadata=ObjectMeta(name="coredns", namespace="kube-system"), data={"x": "y"}))
    note = await remove_coredns_stub(client, "clusterset.local")
    assert note is not None and "no Corefile key" in note
    assert (await client.get(ConfigMap, "coredns", namespace="kube-system")).data == {"x": "y"}


async def test_a_concurrent_edit_is_kept_and_ours_redone_on_top(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    other = apiserver.client()
    await client.create(ConfigMap(metadata=ObjectMeta(name="coredns", namespace="kube-system"),
                                  data={"Corefile": KUBEADM}))
    real_get = client.get
    calls = 0

    async def get_then_someone_edits(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        got = await real_get(*args, **kwargs)  # type: ignore[arg-type]
        if calls == 1:  # between our read and our write, an admin edits the Corefile
            await other.patch(ConfigMap, "coredns", {"data": {"Corefile": KUBEADM + "# tuned\n"}},
                              namespace="kube-system")
        return got

    client.get = get_then_someone_edits  # type: ignore[method-assign]
    assert await ensure_coredns_stub(client, "clusterset.local", ["10.96.0.53"]) is None
    assert calls == 2  # the stale write was refused (409) and redone
    corefile = (await other.get(ConfigMap, "coredns", namespace="kube-system")).data["Corefile"]
    assert corefile.endswith(KUBEADM + "# tuned\n") and "forward . 10.96.0.53:53" in corefile
