"""The metrics of a running local clusterset, as the ServiceMonitor would scrape them: every pod of
isthmus-system with a port named `metrics`, in every cluster and the broker.

- every metric the Grafana dashboard reads is served by some running component (the unit test
  checks the registries of imported modules; this checks the processes `isthmus up` installs);
- a port conflict made with kubectl shows in the agents' clusterset-level metrics.

Starts its own clusterset (`isthmus up --clusters 2`), or, with ISTHMUS_E2E_STATE_DIR, reuses the
running one there (never starting or stopping it).
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.local import Clusterset, wait_for
from tests.harness.monitoring import dashboard, expressions, metric_names

pytestmark = [pytest.mark.e2e, pytest.mark.clusterset, pytest.mark.timeout(300)]

NS = "metrics-e2e"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def cs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusterset]:
    reuse = os.environ.get("ISTHMUS_E2E_STATE_DIR")
    if reuse:
        yield Clusterset(Path(reuse))
        return
    cs = Clusterset(tmp_path_factory.mktemp("metrics") / "state")
    try:
        cs.up("--clusters", "2", "--enable-clusterset-ip")
        yield cs
    finally:
        cs.isthmus("down", "--state-dir", str(cs.root), check=False, timeout=60)
        left = cs.our_processes()
        for line in left:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        assert not left, f"processes survived `isthmus down`: {left}"


def endpoints(cs: Clusterset, context: str) -> dict[str, str]:
    """pod name → its /metrics URL (the pod IP and the container port named `metrics`)."""
    pods = json.loads(cs.kubectl(context, "-n", "isthmus-system", "get", "pods", "-o", "json"))["items"]
    out = {}
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        for c in pod["spec"]["containers"]:
            for port in c.get("ports") or []:
                if port.get("name") == "metrics" and ip:
                    out[pod["metadata"]["name"]] = f"http://{ip}:{port['containerPort']}/metrics"
    return out


def scrape(url: str) -> tuple[set[str], Samples]:
    """The series names a scrape can show (with each type's suffixes) and its samples."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as r:
        text = r.read().decode()
    names: set[str] = set()
    samples: Samples = {}
    for fam in text_string_to_metric_families(text):
        names.add(fam.name)
        names.update(fam.name + s for s in SUFFIXES.get(fam.type, ()))
        for s in fam.samples:
            names.add(s.name)
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return names, samples


def agent_samples(cs: Clusterset, context: str) -> Samples:
    urls = [u for pod, u in endpoints(cs, context).items() if pod.startswith("isthmus-agent-")]
    assert urls, f"no agent pod in {context}"
    merged: Samples = {}
    for url in urls:
        merged.update(scrape(url)[1])
    return merged


def test_every_metric_the_dashboard_reads_is_served(cs: Clusterset) -> None:
    wanted = {n for e in expressions(dashboard()) for n in metric_names(e)}
    contexts = ["broker", *(c["name"] for c in cs.status()["clusters"])]

    def served() -> set[str]:
        names: set[str] = set()
        for context in contexts:
            for url in endpoints(cs, context).values():
                names |= scrape(url)[0]
        missing = wanted - names
        assert not missing, f"no running component serves {sorted(missing)}"
        return names

    wait_for("every dashboard metric served", served, timeout=60, every=2)


def test_a_conflict_made_with_kubectl_shows_in_the_agents_metrics(cs: Clusterset) -> None:
    def manifest(port: int) -> str:
        return f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {NS}}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: {port}, targetPort: 8080, protocol: TCP}}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {{name: web, namespace: {NS}}}
"""

    cs.kubectl("c1", "apply", "-f", "-", stdin=manifest(80))
    cs.kubectl("c2", "apply", "-f", "-", stdin=manifest(81))  # "http" defined twice: PortConflict on both
    try:
        def conflicted() -> bool:
            for c in ("c1", "c2"):
                s = agent_samples(cs, c)
                assert (s.get(("isthmus_exports", frozenset({"cluster": c, "state": "conflict"}.items()))) or 0) >= 1, c
                assert (s.get(("isthmus_export_conflicts", frozenset({"cluster": c, "type": "PortConflict"}.items())))
                        or 0) >= 1, c
                assert (s.get(("isthmus_imports", frozenset({"cluster": c, "type": "ClusterSetIP"}.items()))) or 0) >= 1
                ages = [v for (n, labels), v in s.items() if n == "isthmus_cluster_heartbeat_age_seconds"
                        and ("cluster", c) in labels]
                assert len(ages) >= 2, f"{c} sees its own heartbeat and its peer's"
            return True

        wait_for("the port conflict in c1's and c2's agent metrics", conflicted, timeout=60, every=1)
    finally:
        for c in ("c1", "c2"):
            cs.kubectl(c, "delete", "namespace", NS, "--wait=false", check=False)
