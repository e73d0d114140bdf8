"""Pods' lives in a local clusterset as a load balancer's clients see them: a scale-down behind a
pool, kube-lite restarting, HAProxy workers killed. Real HTTP clients, bounded loops.

One clusterset (1 cluster) is shared by the tests of this module, in file order.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.local import Clusterset, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.clusterset, pytest.mark.timeout(300)]

APP = """
apiVersion: v1
kind: Namespace
metadata: {name: life}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: life}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {isthmus.io/workload: echo}
    spec:
      containers:
      - name: echo
        image: echo
        ports: [{containerPort: 8080, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: life
  annotations:
    kubernetes.dcos.io/dklb-config: |
      frontends:
      - port: 18301
        servicePort: 80
spec:
  type: LoadBalancer
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
"""
POOL = "c1--life--web"
PUBLIC = "127.30.1.1"
PORT = 18301


class Requests:
    """HTTP requests through the pool in a loop on a thread (keep-alive, as a browser or a client
    library sends them; a new connection when the server closes one), counting failures."""

    MAX = 5000  # bounded even if stop() is never reached

    def __init__(self, host: str, port: int, pause: float = 0.01) -> None:
        self.host, self.port, self.pause = host, port, pause
        self.ok = 0
        self.failures: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn: http.client.HTTPConnection | None = None
        for _ in range(self.MAX):
            if self._stop.is_set():
                break
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
                conn.request("GET", "/")
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200:
                    raise OSError(f"HTTP {resp.status}: {body[:100]!r}")
                json.loads(body)
                self.ok += 1
                if resp.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException, ValueError) as e:
                self.failures.append((time.monotonic(), repr(e)))
                if conn is not None:
                    conn.close()
                conn = None
            time.sleep(self.pause)
        if conn is not None:
            conn.close()

    def __enter__(self) -> Requests:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _pool(cs: Clusterset) -> dict[str, Any] | None:
    out = cs.kubectl("c1", "get", "lbp", POOL, "-o", "json", check=False)
    return json.loads(out) if out.strip() else None


def _answers(host: str, port: int, n: int = 4) -> bool:
    with Requests(host, port) as r:
        deadline = time.monotonic() + 10
        while r.ok < n and time.monotonic() < deadline:
            time.sleep(0.05)
    return r.ok >= n


def _ready_pods(cs: Clusterset) -> int:
    out = cs.kubectl("c1", "-n", "life", "get", "deploy", "web", "-o", "jsonpath={.status.readyReplicas}")
    return int(out or 0)


@pytest.fixture(scope="module")
def cs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusterset]:
    cs = Clusterset(tmp_path_factory.mktemp("local") / "state")
    try:
        for _ in range(60):  # another clusterset (someone else's test) may hold the namespace: wait
            p = cs.isthmus("up", "--detach", "--state-dir", str(cs.root), "--clusters", "1", check=False,
                           timeout=240)
            if p.returncode == 0:
                break
            assert "another local clusterset" in p.stderr, p.stderr
            time.sleep(10)
        else:
            raise AssertionError("another local clusterset kept running")
        cs.kubectl("c1", "apply", "-f", "-", stdin=APP)
        wait_for("the pool ready", lambda: (_pool(cs) or {}).get("status", {}).get("ready") == "1/1", timeout=90)
        wait_for("4 pods ready", lambda: _ready_pods(cs) == 4, timeout=60)
        wait_for("answers through the pool", lambda: _answers(PUBLIC, PORT), timeout=60)
        yield cs
    finally:
        cs.isthmus("down", "--state-dir", str(cs.root), check=False, timeout=60)
        left = cs.our_processes()
        for line in left:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        assert not left, f"processes survived `isthmus down`: {left}"


def test_a_scale_down_behind_a_pool_fails_no_request(cs: Clusterset) -> None:
    for replicas in (1, 4, 2):
        with Requests(PUBLIC, PORT) as r:
            time.sleep(1.0)
            cs.kubectl("c1", "-n", "life", "scale", "deploy", "web", f"--replicas={replicas}")
            wait_for(f"{replicas} pods", lambda n=replicas: len(cs.kubectl(
                "c1", "-n", "life", "get", "pods", "-l", "app=web", "-o", "name").split()) == n
                and _ready_pods(cs) == n, timeout=60)
            time.sleep(2.0)
        print(f"scale to {replicas}: {r.ok} requests answered, {len(r.failures)} failed: {r.failures[:5]}")
        assert r.ok > 50
        assert r.failures == []


def _pools_pod(cs: Clusterset) -> dict[str, Any]:
    out = json.loads(cs.kubectl("c1", "-n", "isthmus-pools", "get", "pods", "-l", "app.kubernetes.io/name=isthmus-pools",
                                "-o", "json"))
    (pod,) = out["items"]
    return dict(pod)


def _kube_lite_pid(cs: Clusterset) -> int:
    """kube-lite's pid, 0 while the supervisor has none (between the kill and the restart)."""
    return int(cs.status()["clusters"][0]["processes"]["kube-lite"]["pid"] or 0)


def test_a_restarted_kube_lite_starts_the_pool_manager_once_its_predecessor_is_gone(cs: Clusterset) -> None:
    """kube-lite killed: its pods get SIGTERM and take their time to stop. The new kube-lite must not
    start their successors on ports they still hold (the pool manager's /metrics, its HAProxy's
    frontends): one restart each, no crash loop, and the load balancer is back as soon as it can be."""
    before = _pools_pod(cs)
    restarts = before["status"]["containerStatuses"][0]["restartCount"]
    old = _kube_lite_pid(cs)
    with Requests(PUBLIC, PORT, pause=0.02) as r:
        time.sleep(1.0)
        os.kill(old, signal.SIGKILL)
        killed = time.monotonic()
        wait_for("a new kube-lite", lambda: _kube_lite_pid(cs) not in (0, old), timeout=30)
        wait_for("the pool manager running again", lambda: (
            p := _pools_pod(cs))["status"]["containerStatuses"][0]["restartCount"] > restarts
            and p["status"]["containerStatuses"][0]["ready"], timeout=90)
        wait_for("answers through the pool again", lambda: time.monotonic() - killed > 3 and (
            not r.failures or time.monotonic() - r.failures[-1][0] > 2), timeout=90)
    down = r.failures[-1][0] - r.failures[0][0] if r.failures else 0.0
    print(f"load balancer down {down:.1f}s after kube-lite was killed ({len(r.failures)} failed requests)")
    status = _pools_pod(cs)["status"]["containerStatuses"][0]
    assert status["restartCount"] == restarts + 1, status  # once: no crash loop on ports still held
    for previous in ("--previous=false", "--previous=true"):
        logs = cs.kubectl("c1", "-n", "isthmus-pools", "logs", before["metadata"]["name"], previous)
        assert "address already in use" not in logs


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _instance(cs: Clusterset) -> dict[str, Any]:
    pool = _pool(cs) or {}
    return dict(((pool.get("status") or {}).get("instances") or [{}])[0])


def _kube_lite_log(cs: Clusterset) -> Path:
    return cs.root / "logs" / "c1-kube-lite.log"


KILLS = int(os.environ.get("ISTHMUS_TEST_HAPROXY_KILLS", "8"))


def test_killed_haproxy_workers_never_take_kube_lite_down(cs: Clusterset) -> None:
    """kill -9 of a pool's HAProxy worker, again and again, with traffic through the pool (issue 40
    item 8: once kube-lite died of SIGABRT 0.8 s after such a kill). kube-lite stays the same
    process, and its log shows no fatal error (a fatal signal would leave a traceback there now)."""
    kube_lite = _kube_lite_pid(cs)
    log_at = _kube_lite_log(cs).stat().st_size
    with Requests(PUBLIC, PORT, pause=0.02) as r, Requests(PUBLIC, PORT, pause=0.0), \
            Requests("127.31.1.1", PORT, pause=0.0):  # a few connections, spliced in the proxy, reset at once
        for _ in range(KILLS):
            inst = wait_for("the instance running", lambda: (i := _instance(cs)).get("state") == "Running"
                            and i.get("pid") and _children(int(i["pid"])) and i, timeout=60)
            master = int(inst["pid"])
            for worker in _children(master):
                os.kill(worker, signal.SIGKILL)
            time.sleep(0.8)  # when kube-lite died last time
            assert _kube_lite_pid(cs) == kube_lite
            wait_for("a new instance", lambda m=master: _instance(cs).get("pid") not in (None, 0, m)
                     and _instance(cs).get("state") == "Running", timeout=60)
            wait_for("answers through the pool", lambda: _answers(PUBLIC, PORT), timeout=60)
            time.sleep(0.5)
    print(f"{KILLS} HAProxy workers killed: {r.ok} requests answered, {len(r.failures)} failed")
    assert _kube_lite_pid(cs) == kube_lite
    with _kube_lite_log(cs).open("rb") as f:
        f.seek(log_at)
        text = f.read().decode(errors="replace")
    assert "Fatal Python error" not in text, text[-3000:]
