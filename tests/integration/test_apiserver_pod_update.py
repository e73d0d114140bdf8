"""A Pod's spec is immutable but for what kube-apiserver v1.32 lets change (ValidatePodUpdate), and
the Pod defaulting kube does on create (hostNetwork host ports, the SchedulingGated condition), seen
by kubectl and API clients."""

from __future__ import annotations

import json
import random
import re
from typing import Any, cast

from lightkube.resources.core_v1 import Pod

from isthmus.local.kubelite.pods import PodRuntime
from isthmus.runtime import EventRecorder, Informer
from tests.harness.apiserver import RunningApiServer
from tests.integration.test_apiserver_pod_admission import Env, env, pod

__all__ = ["env"]  # the fixture, shared with the admission tests

UPDATABLE = ("pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
             "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
             "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")


async def create(env: Env, body: dict[str, Any], ns: str = "default") -> dict[str, Any]:
    code, out, _ = await env.call("POST", f"/api/v1/namespaces/{ns}/pods", body)
    assert code == 201, out
    return dict(out)


async def test_kubectl_patch_of_a_pods_env_is_refused_with_kubes_message_and_diff(env: Env) -> None:
    await create(env, pod("p", containers=[{"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}]}]))
    code, out, err = await env.kubectl("patch", "pod", "p", "--type=json", "-p",
                                       '[{"op": "replace", "path": "/spec/containers/0/env/0/value", "value": "2"}]')
    assert code == 1, out
    assert err.startswith(f'The Pod "p" is invalid: spec: Forbidden: {UPDATABLE}\n  core.PodSpec{{\n'), err
    assert re.search(r'\n- \t{5}Value: +"1",\n\+ \t{5}Value: +"2",\n', err), err
    assert "Containers: []core.Container{" in err

    code, out, err = await env.kubectl("patch", "pod", "p", "-p", '{"spec": {"nodeName": "elsewhere"}}')
    assert code == 1 and re.search(r'\n\+ \tNodeName: +"elsewhere",\n', err), err


async def test_kubectl_set_image_on_a_pod_works(env: Env) -> None:
    await create(env, pod("p", initContainers=[{"name": "i", "image": "busybox"}]))
    code, out, err = await env.kubectl("set", "image", "pod/p", "c=busybox:1.36", "i=alpine")
    assert code == 0, err
    assert out.strip() == "pod/p image updated"
    code, got, _ = await env.call("GET", "/api/v1/namespaces/default/pods/p")
    assert got["spec"]["containers"][0]["image"] == "busybox:1.36"
    assert got["spec"]["initContainers"][0]["image"] == "alpine"
    code, out, err = await env.kubectl("patch", "pod", "p", "--type=json", "-p",
                                       '[{"op": "replace", "path": "/spec/containers/0/image", "value": ""}]')
    assert code == 1 and 'The Pod "p" is invalid: spec.containers[0].image: Required value' in err, err


async def test_containers_may_not_be_added(env: Env) -> None:
    await create(env, pod("p"))
    code, _, err = await env.kubectl("patch", "pod", "p", "--type=json", "-p",
                                     '[{"op": "add", "path": "/spec/containers/-", "value": {"name": "d", '
                                     '"image": "busybox"}}]')
    assert code == 1
    assert err.strip() == ('The Pod "p" is invalid: spec.containers: Forbidden: pod updates may not add or remove '
                           'containers')


async def test_tolerations_may_only_be_added(env: Env) -> None:
    await create(env, pod("p", tolerations=[{"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute",
                                             "tolerationSeconds": 10}]))
    code, got, _ = await env.call("GET", "/api/v1/namespaces/default/pods/p")
    tolerations = got["spec"]["tolerations"]
    more = [*tolerations, {"key": "new", "operator": "Exists"}]
    code, _, err = await env.kubectl("patch", "pod", "p", "-p", json.dumps({"spec": {"tolerations": more}}))
    assert code == 0, err
    changed = [{**more[0], "tolerationSeconds": 5}, *more[1:]]  # only its seconds: allowed
    code, _, err = await env.kubectl("patch", "pod", "p", "-p", json.dumps({"spec": {"tolerations": changed}}))
    assert code == 0, err
    code, _, err = await env.kubectl("patch", "pod", "p", "-p", json.dumps({"spec": {"tolerations": more[1:]}}))
    assert code == 1
    assert err.startswith('The Pod "p" is invalid: spec.tolerations: Forbidden: existing toleration can not be '
                          'modified except its tolerationSeconds'), err


async def test_active_deadline_may_be_set_and_shortened_only(env: Env) -> None:
    await create(env, pod("p"))
    for value in (100, 50):
        code, _, err = await env.kubectl("patch", "pod", "p", "-p", json.dumps({"spec": {"activeDeadlineSeconds": value}}))
        assert code == 0, err
    code, _, err = await env.kubectl("patch", "pod", "p", "-p", '{"spec": {"activeDeadlineSeconds": 200}}')
    assert code == 1
    assert err.strip() == ('The Pod "p" is invalid: spec.activeDeadlineSeconds: Invalid value: 200: must be less '
                           'than or equal to previous value')
    code, _, err = await env.kubectl("patch", "pod", "p", "-p", '{"spec": {"activeDeadlineSeconds": null}}')
    assert code == 1
    assert err.strip() == ('The Pod "p" is invalid: spec.activeDeadlineSeconds: Invalid value: "null": must not '
                           'update from a positive integer to nil value')


async def test_scheduling_gates_block_with_a_condition_and_may_only_be_removed(env: Env) -> None:
    made = await create(env, pod("p", schedulingGates=[{"name": "a"}, {"name": "b"}]))
    [cond] = made["status"]["conditions"]
    assert {k: cond[k] for k in ("type", "status", "reason", "message")} == {
        "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates"}
    code, out, _ = await env.kubectl("get", "pod", "p")
    assert out.split("\n")[1].split()[2] == "SchedulingGated"
    code, _, err = await env.kubectl("patch", "pod", "p", "-p", '{"spec": {"schedulingGates": [{"name": "a"}, '
                                                                 '{"name": "c"}]}}')
    assert code == 1
    assert err.strip() == ('The Pod "p" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is '
                           "allowed, but found new scheduling gate 'c'")
    # a gated Pod's nodeSelector may gain keys (kube lets whoever lifts the gate steer it)
    code, _, err = await env.kubectl("patch", "pod", "p", "-p", '{"spec": {"schedulingGates": [{"name": "a"}], '
                                                                 '"nodeSelector": {"zone": "z1"}}}')
    assert code == 0, err
    code, _, err = await env.kubectl("patch", "pod", "p", "-p", '{"spec": {"nodeSelector": {"zone": "z2"}}}')
    assert code == 1, err
    assert err.strip() == ('The Pod "p" is invalid: spec.nodeSelector: Invalid value: map[string]string{"zone":"z2"}: '
                           'only additions to spec.nodeSelector are allowed (no mutations or deletions)')
    code, _, err = await env.kubectl("patch", "pod", "p", "--type=json", "-p",
                                     '[{"op": "remove", "path": "/spec/schedulingGates"}]')
    assert code == 0, err


async def test_metadata_and_status_writes_and_an_unchanged_replace_still_work(env: Env) -> None:
    await create(env, pod("p"))
    code, _, err = await env.kubectl("label", "pod", "p", "team=a")
    assert code == 0, err
    code, live, _ = await env.call("GET", "/api/v1/namespaces/default/pods/p")
    code, out, err = await env.kubectl("replace", "-f", "-", stdin=json.dumps(live))
    assert code == 0 and out.strip() == "pod/p replaced", err
    # the tolerations DefaultTolerationSeconds added and the priority admission set are kept when left out
    body = json.loads(json.dumps(live))
    body["spec"]["tolerations"] = []
    body["spec"].pop("priority", None)
    code, out, _ = await env.call("PUT", "/api/v1/namespaces/default/pods/p", body)
    assert code == 200, out
    code, _, err = await env.kubectl("patch", "pod", "p", "--subresource=status", "--type=merge", "-p",
                                     '{"status": {"phase": "Running", "podIP": "10.0.0.9"}}')
    assert code == 0, err
    code, got, _ = await env.call("GET", "/api/v1/namespaces/default/pods/p")
    assert got["status"]["podIP"] == "10.0.0.9"


async def test_host_network_ports_default_their_host_port_in_pods_not_templates(env: Env) -> None:
    made = await create(env, pod("h", hostNetwork=True, containers=[
        {"name": "c", "image": "busybox", "ports": [{"containerPort": 9180}, {"containerPort": 53, "hostPort": 53,
                                                                              "protocol": "UDP"}]}]))
    assert made["spec"]["containers"][0]["ports"] == [
        {"containerPort": 9180, "hostPort": 9180, "protocol": "TCP"},
        {"containerPort": 53, "hostPort": 53, "protocol": "UDP"}]
    plain = await create(env, pod("n", containers=[{"name": "c", "image": "busybox",
                                                    "ports": [{"containerPort": 80}]}]))
    assert "hostPort" not in plain["spec"]["containers"][0]["ports"][0]
    code, out, _ = await env.call("POST", "/apis/apps/v1/namespaces/default/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
            "metadata": {"labels": {"a": "b"}},
            "spec": {"hostNetwork": True, "containers": [{"name": "c", "image": "busybox",
                                                          "ports": [{"containerPort": 9180}]}]}}}})
    assert code == 201, out
    assert "hostPort" not in out["spec"]["template"]["spec"]["containers"][0]["ports"][0]


# ---------------------------------------------------------------- printers

def table(out: str) -> dict[str, list[str]]:
    """kubectl's table as {first cell: the row's cells}, the header under "NAME"."""
    return {line.split()[0]: line.split() for line in out.strip().split("\n")}


async def test_kubectl_get_prints_kubes_columns_for_apf_pdb_and_priority_classes(env: Env) -> None:
    code, out, err = await env.kubectl("get", "flowschemas")
    assert code == 0, err
    rows = table(out)
    assert rows["NAME"] == ["NAME", "PRIORITYLEVEL", "MATCHINGPRECEDENCE", "DISTINGUISHERMETHOD", "AGE", "MISSINGPL"]
    assert rows["exempt"][:4] == ["exempt", "exempt", "1", "<none>"]
    assert rows["global-default"][:4] == ["global-default", "global-default", "9900", "ByUser"]
    assert rows["global-default"][5] in ("False", "?")  # ? until the APF controller's first pass

    code, out, err = await env.kubectl("get", "prioritylevelconfigurations")
    assert code == 0, err
    rows = table(out)
    assert rows["NAME"] == ["NAME", "TYPE", "NOMINALCONCURRENCYSHARES", "QUEUES", "HANDSIZE", "QUEUELENGTHLIMIT",
                            "AGE"]
    assert rows["exempt"][:6] == ["exempt", "Exempt", "<none>", "<none>", "<none>", "<none>"]
    assert rows["workload-low"][:6] == ["workload-low", "Limited", "100", "128", "6", "50"]

    code, out, _ = await env.call("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"},
        "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"a": "b"}}}})
    assert code == 201, out
    code, out, err = await env.kubectl("get", "pdb")
    rows = table(out)
    assert rows["NAME"] == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
    assert rows["b"][:4] == ["b", "N/A", "50%", "0"]

    code, out, err = await env.kubectl("get", "priorityclass", "system-cluster-critical")
    rows = table(out)
    assert rows["NAME"] == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert rows["system-cluster-critical"][:3] == ["system-cluster-critical", "2000000000", "false"]
    assert rows["system-cluster-critical"][4] == "PreemptLowerPriority"


# ---------------------------------------------------------------- kube-lite's kubelet binding a Pod itself

async def test_a_kubelet_that_binds_uses_pods_binding(apiserver: RunningApiServer) -> None:
    """A kubelet with no scheduler beside it (`bind=True`) binds through pods/binding: a Pod update
    may not set spec.nodeName (before, its replace of the Pod was refused with 422)."""
    client = apiserver.client()
    body = pod("p")
    body["metadata"]["namespace"] = "default"
    await client.create(cast(Pod, Pod.from_dict(body)))
    pods: Informer[Pod] = Informer(client, Pod)
    pods.start()
    try:
        await pods.wait_synced()
        a, b = random.randint(100, 199), random.randint(0, 255)
        runtime = PodRuntime(client, pods, EventRecorder(client, "kubelet"), cluster="c1",
                             pod_cidr=f"127.{a}.{b}.0/24", bind=True)
        assert await runtime.reconcile("default/p") is None
        got = (await client.get(Pod, "p", namespace="default")).to_dict()
        assert got["spec"]["nodeName"] == runtime.node
        assert {c["type"]: c["status"] for c in got["status"]["conditions"]}["PodScheduled"] == "True"
    finally:
        await pods.stop()
