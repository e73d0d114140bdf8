"""state.json, port settling, command lines and process identity of the local clusterset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from isthmus.local import endpoints, plan, supervisor, up
from isthmus.local.state import Layout, PartState, State, StateError, load_state, save_state


def test_state_round_trips_through_json(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path)
    assert load_state(layout) is None
    state = State(clusters=2, enable_clusterset_ip=True, ports={"broker-apiserver": 1234},
                  broker_server="https://127.0.0.1:1234", joined={"c1": "127.240.0.0/16"}, setup_vip=True,
                  supervisor_pid=42, parts={"c1-agent": PartState(pid=7, restarts=2, last_exit=-9, started_at=1.5),
                                            "broker-ui": PartState(restarts=1, standby=True)})
    save_state(layout, state)
    on_disk = json.loads(layout.state_file.read_text())
    assert on_disk["setup"]["joined"] == {"c1": "127.240.0.0/16"}
    assert on_disk["parts"]["c1-agent"] == {"pid": 7, "restarts": 2, "lastExit": -9, "startedAt": 1.5,
                                            "lastError": None, "failed": False, "standby": False}
    assert on_disk["parts"]["broker-ui"]["standby"] is True  # the web view waiting for its first use
    again = load_state(layout)
    assert again is not None
    assert again.to_json() == state.to_json()
    assert again.recorded_pids() == {"c1-agent": 7, "supervisor": 42}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temp file left behind


def test_a_damaged_state_file_is_a_clear_error(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path)
    layout.state_file.write_text("{not json")
    with pytest.raises(StateError, match="damaged"):
        load_state(layout)
    layout.state_file.write_text(json.dumps({"version": 99, "clusters": 1}))
    with pytest.raises(StateError, match="version"):
        load_state(layout)


def test_layout_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    layout = Layout.at(".isthmus")
    assert layout.root == tmp_path.resolve() / ".isthmus"
    assert layout.kubeconfig_of("c1") == layout.root / "kubeconfigs" / "c1.yaml"
    assert layout.log("c1-agent") == layout.root / "logs" / "c1-agent.log"


def test_saved_ports_are_kept_and_taken_ones_replaced() -> None:
    state = State(clusters=1)
    counter = iter(range(40000, 41000))
    picked = up.resolve_ports(state, free=lambda p, udp: True, pick=lambda taken, udp: next(counter))
    assert set(picked) == set(plan.port_names(1)) and len(set(state.ports.values())) == len(picked)
    before = dict(state.ports)
    assert up.resolve_ports(state, free=lambda p, udp: True, pick=lambda t, u: 1 / 0) == []  # type: ignore[arg-type,return-value]
    assert state.ports == before
    busy = before["c1-apiserver"]
    changed = up.resolve_ports(state, free=lambda p, udp: p != busy, pick=lambda taken, udp: 45000)
    assert changed == ["c1-apiserver"] and state.ports["c1-apiserver"] == 45000


def test_picked_ports_avoid_node_ports_and_ephemeral_ports() -> None:
    """An ephemeral port can be held by any outgoing connection's local end: a server picked
    there would fail to bind on a later restart."""
    for _ in range(20):
        port = up.pick_port(set())
        assert port not in up.RESERVED_PORTS and port not in up.ephemeral_ports() and up.port_free(port)


def test_every_part_command_names_the_state_dir(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path)
    state = State(clusters=2)
    up.resolve_ports(state)
    for part in plan.parts(2):
        argv = up.part_argv(layout, state, part)
        assert argv[3] == part.kind
        assert any(supervisor._names(a, str(layout.root)) for a in argv), argv
    kl = up.part_argv(layout, state, plan.PartId("c2", plan.KUBE_LITE))
    assert kl[kl.index("--pod-cidr") + 1] == "127.102.0.0/16" and kl[kl.index("--node-port-range") + 1] == "30500-30999"
    assert kl[kl.index("--root-dir") + 1] == str(layout.root / "kubelet" / "c2")
    api = up.part_argv(layout, state, plan.PartId("c2", plan.APISERVER))
    assert "--anonymous-auth" in api  # kubeadm's setting: the supervisor probes /readyz anonymously
    join = up.join_argv(layout, state, plan.cluster_plan(2, 2))
    assert join[join.index("--clusterset-ip-cidr") + 1] == "127.241.0.0/16"
    assert join[join.index("--broker-kubeconfig") + 1] == str(layout.kubeconfig_of(plan.BROKER))
    state.enable_clusterset_ip = True
    assert "--enable-clusterset-ip" in up.deploy_broker_argv(layout, state)
    ui = up.part_argv(layout, state, plan.PartId(plan.BROKER, plan.UI))
    port = state.ports["broker-ui"]
    assert ui[ui.index("--kubeconfig") + 1] == str(layout.kubeconfig)  # every context: broker and members
    assert ui[ui.index("--broker-context") + 1] == plan.BROKER
    assert ui[ui.index("--listen") + 1] == f"127.0.0.1:{port}"
    assert endpoints.ui_url(state) == f"http://127.0.0.1:{port}/"
    assert endpoints.ready_url(state, plan.PartId(plan.BROKER, plan.UI)) == f"http://127.0.0.1:{port}/readyz"


def test_the_local_overlay_patches_dns_for_the_plan(tmp_path: Path) -> None:
    """The overlay `up` applies: the member base by a relative path, DNS on its fixed NodePort and
    answering cluster.local; kubectl renders it (when there is one) exactly as our renderer does."""
    import shutil
    import subprocess

    import yaml

    from isthmus.kube.manifests import deploy_dir, render
    from isthmus.local import components

    cp = plan.cluster_plan(2, 3)
    directory = components.overlay(cp, deploy_dir(), tmp_path / "manifests" / "c2", tmp_path / "pools" / "c2")
    kz = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert not Path(kz["resources"][0]).is_absolute()
    objs = render(directory)
    svc = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == plan.DNS_SERVICE)
    assert svc["spec"]["type"] == "NodePort"
    assert [p["nodePort"] for p in svc["spec"]["ports"]] == [30999, 30999]
    assert {p["protocol"] for p in svc["spec"]["ports"]} == {"UDP", "TCP"}
    dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == plan.DEPLOYMENTS[plan.DNS])
    assert "--local-zone=cluster.local" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert dep["spec"]["replicas"] == 1  # two in deploy/: one machine gains no availability from a second
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    manager = next(o for o in objs if o["kind"] == "Deployment"
                   and o["metadata"]["name"] == plan.DEPLOYMENTS[plan.CONTROLLER_MANAGER])
    assert manager["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "--cluster-name=c2"
    pools = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == plan.DEPLOYMENTS[plan.POOLS])
    assert pools["spec"]["template"]["spec"]["hostNetwork"] is False
    webhook = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == plan.DEPLOYMENTS[plan.WEBHOOK])
    assert webhook["spec"]["replicas"] == 1
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    assert len(deployments) == len(plan.POD_KINDS)
    assert {d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSeconds"] for d in deployments} == {1}
    assert pools["spec"]["template"]["spec"]["containers"][0]["args"][-3:] == [
        "--public-address=127.30.2.1", "--private-address=127.31.2.1", f"--state-dir={tmp_path / 'pools' / 'c2'}"]
    if shutil.which("kubectl"):
        out = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=True)
        assert list(yaml.safe_load_all(out.stdout)) == objs


def test_kubeconfigs_have_one_context_per_cluster(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path)
    state = State(clusters=2)
    up.resolve_ports(state)
    up.write_kubeconfigs(layout, state)
    merged = yaml.safe_load(layout.kubeconfig.read_text())
    assert [c["name"] for c in merged["contexts"]] == ["broker", "c1", "c2"]
    assert merged["current-context"] == "c1"
    one = yaml.safe_load(layout.kubeconfig_of("c2").read_text())
    assert one["current-context"] == "c2"
    assert one["clusters"][0]["cluster"]["server"] == f"https://127.0.0.1:{state.ports['c2-apiserver']}"
    assert one["users"][0]["user"]["token"] == layout.token_file("c2").read_text().strip()
    assert oct(layout.token_file("c2").stat().st_mode & 0o777) == "0o600"
    token = layout.token_file("c2").read_text()
    up.write_kubeconfigs(layout, state)  # rewriting keeps tokens and CAs
    assert layout.token_file("c2").read_text() == token


def test_setup_is_redone_only_when_the_broker_moved(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path)
    state = State(clusters=1)
    up.resolve_ports(state)
    assert up.needs_deploy(layout, state)
    layout.broker_info.write_text("x")
    state.broker_server, state.setup_vip = up.server_url(state, "broker"), False
    assert not up.needs_deploy(layout, state)
    state.ports["broker-apiserver"] += 1
    assert up.needs_deploy(layout, state)


def test_only_processes_naming_the_state_dir_are_ours(tmp_path: Path) -> None:
    root = tmp_path / "st"
    sibling = tmp_path / "st2"
    code = "import time; time.sleep(30)"
    mine = subprocess.Popen([sys.executable, "-c", code, "--data-dir", str(root / "c1")])
    other = subprocess.Popen([sys.executable, "-c", code, f"--data-dir={sibling}/c1"])
    try:
        # Popen returns once exec has begun; /proc/<pid>/cmdline shows the new arguments a moment
        # later (a loaded machine showed the gap). Until then a process is, rightly, not known as ours.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(code in (supervisor.cmdline(p.pid) or [])
                                                      for p in (mine, other)):
            time.sleep(0.01)
        assert supervisor.is_ours(mine.pid, root)
        assert not supervisor.is_ours(mine.pid, root, marker="--supervise")
        assert not supervisor.is_ours(other.pid, root)  # a prefix is not the dir
        assert not supervisor.is_ours(os.getpid(), root)
        assert not supervisor.is_ours(None, root)
        left = supervisor.terminate({"c1-agent": mine.pid, "x": other.pid}, root, grace=5)
        assert left == {}
        assert mine.wait(5) is not None
        assert other.poll() is None  # never signalled
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()
    assert not supervisor.is_ours(mine.pid, root)


def test_stop_order_puts_apiservers_last() -> None:
    names = ["broker-apiserver", "c1-apiserver", "c1-agent", "supervisor", "c2-proxy"]
    assert sorted(names, key=supervisor.stop_rank) == [
        "supervisor", "c1-agent", "c2-proxy", "c1-apiserver", "broker-apiserver"]
