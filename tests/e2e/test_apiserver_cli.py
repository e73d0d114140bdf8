"""`isthmus apiserver` as a user runs it: private files, never starting empty on a damaged
database, never serving anonymously, and refusing to serve plain HTTP beyond loopback."""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")]

ISTHMUS = str(Path(sys.executable).with_name("isthmus"))
PRIVATE = ("state.db", "state.db-wal", "kubeconfig", "token", "initialized.json")
TLS_FILES = ("ca.crt", "ca.key", "server.crt", "server.key")


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str
    kubeconfig: Path

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.kubeconfig}.cache",
                            *args], capture_output=True, text=True, timeout=30)
        assert not check or p.returncode == 0, p.stderr
        return p

    def get(self, path: str, auth: str | None = None) -> tuple[int, dict[str, object] | str]:
        """GET with the CA from the kubeconfig; `auth` is the whole Authorization header."""
        cfg = yaml.safe_load(self.kubeconfig.read_text())
        ca = cfg["clusters"][0]["cluster"].get("certificate-authority-data")
        ctx = ssl.create_default_context(cadata=base64.b64decode(ca).decode()) if ca else None
        req = urllib.request.Request(self.url + path, headers={"Authorization": auth} if auth else {})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                status, ctype, body = r.status, r.headers.get_content_type(), r.read()
        except urllib.error.HTTPError as e:
            status, ctype, body = e.code, e.headers.get_content_type(), e.read()
        return status, json.loads(body) if ctype == "application/json" else body.decode()

    def token(self) -> str:
        return str(yaml.safe_load(self.kubeconfig.read_text())["users"][0]["user"]["token"])


def start(*args: str, log: Path) -> Server:
    """Start `isthmus apiserver --port 0 ARGS` and wait until it listened and wrote its kubeconfig."""
    with open(log, "a") as err:
        proc = subprocess.Popen([ISTHMUS, "apiserver", "--port", "0", *args], stdout=subprocess.PIPE,
                                stderr=err, text=True)
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    # A reader thread, so a server that never prints the expected line cannot block the test.
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or ()], daemon=True).start()
    url, kubeconfig = "", ""
    deadline = time.monotonic() + 30
    try:
        while not kubeconfig and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if "listening on" in line:
                url = line.split()[-1]
            elif line.startswith("kubeconfig written to"):
                kubeconfig = line.split()[-1]
    finally:
        if not kubeconfig:
            stop(proc)
    assert kubeconfig, f"apiserver did not start: {log.read_text()}"
    return Server(proc, url, Path(kubeconfig))


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def running() -> Iterator[list[Server]]:
    """Servers started by a test, stopped (by pid) whatever happens."""
    servers: list[Server] = []
    yield servers
    for s in servers:
        stop(s.proc)


def refused(*args: str) -> str:
    """Run a command that must fail as a user error before serving: exit 2, one `error:` line."""
    p = subprocess.run([ISTHMUS, "apiserver", *args], capture_output=True, text=True, timeout=20)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "listening on" not in p.stdout, "it served before refusing"
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


def modes(data: Path) -> dict[str, int]:
    out = {".": data.stat().st_mode & 0o777, "tls": (data / "tls").stat().st_mode & 0o777}
    for name in PRIVATE:
        out[name] = (data / name).stat().st_mode & 0o777
    for name in TLS_FILES:
        out[f"tls/{name}"] = (data / "tls" / name).stat().st_mode & 0o777
    return out


ALL_PRIVATE = {".": 0o700, "tls": 0o700, **dict.fromkeys(PRIVATE, 0o600), **{f"tls/{n}": 0o600 for n in TLS_FILES}}


def test_data_dir_is_private_and_loosened_modes_are_fixed_at_start(tmp_path: Path, running: list[Server]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o755)
    running.append(s := start("--data-dir", str(data), log=tmp_path / "log"))
    s.kubectl("create", "configmap", "keep", "--from-literal=k=v")
    assert modes(data) == ALL_PRIVATE
    stop(s.proc)

    # As an older version (or a umask) left them: readable by everyone.
    os.chmod(data, 0o755)
    os.chmod(data / "tls", 0o755)
    for f in [*data.iterdir(), *(data / "tls").iterdir()]:
        if f.is_file():
            os.chmod(f, 0o644)
    running.append(s := start("--data-dir", str(data), log=tmp_path / "log"))
    assert modes(data) == ALL_PRIVATE
    assert s.kubectl("get", "configmap", "keep", "-o", "jsonpath={.data.k}").stdout == "v"


@pytest.fixture(scope="module")
def initialised(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped apiserver's data dir holding one ConfigMap."""
    data = tmp_path_factory.mktemp("initialised") / "data"
    s = start("--data-dir", str(data), log=data.parent / "log")
    try:
        s.kubectl("create", "configmap", "keep", "--from-literal=k=v")
    finally:
        stop(s.proc)
    return data


def _empty(db: Path) -> None:
    db.write_bytes(b"")


def _missing(db: Path) -> None:
    db.unlink()


def _garbage(db: Path) -> None:
    db.write_bytes(os.urandom(8192))


@pytest.mark.parametrize(("damage", "problem"), [
    (_empty, "is empty (0 bytes)"),
    (_missing, "is missing, but data dir {data} was initialised before ({data}/initialized.json exists)"),
    (_garbage, "is not an SQLite database"),
], ids=["truncated", "missing", "garbage"])
def test_damaged_database_after_init_is_refused(initialised: Path, tmp_path: Path, damage: object,
                                                problem: str) -> None:
    data = tmp_path / "data"
    shutil.copytree(initialised, data)
    db = data / "state.db"
    damage(db)  # type: ignore[operator]
    before = db.read_bytes() if db.exists() else None
    line = refused("--data-dir", str(data))
    assert line == (f"error: database {db} {problem.format(data=data)}: restore it from a backup, "
                    "or start once with --reinitialize to begin with an empty database")
    assert (db.read_bytes() if db.exists() else None) == before


def test_a_second_apiserver_on_a_data_dir_in_use_is_refused(tmp_path: Path, running: list[Server]) -> None:
    """One server holds a data dir's database (it keeps names unique in memory): a second one is
    refused, with --reinitialize too, and nothing of the first one's is touched."""
    data = tmp_path / "data"
    running.append(s := start("--data-dir", str(data), log=tmp_path / "log"))
    s.kubectl("create", "configmap", "keep", "--from-literal=k=v")
    before = {p: p.read_bytes() for p in data.rglob("*") if p.is_file() and not p.name.startswith("state.db")}
    for extra in ((), ("--reinitialize",)):
        line = refused("--port", "0", "--data-dir", str(data), *extra)
        assert line == (f"error: database {data}/state.db is in use by another process (is another apiserver "
                        "running on this data dir?)")
    assert {p: p.read_bytes() for p in data.rglob("*") if p.is_file() and not p.name.startswith("state.db")} == before
    assert not list(data.glob("state.db.unusable-*"))
    s.kubectl("create", "configmap", "more", "--from-literal=k=w")
    assert s.kubectl("get", "configmap", "keep", "-o", "jsonpath={.data.k}").stdout == "v"


def test_every_answered_create_survives_a_kill_in_the_middle_of_writes(tmp_path: Path, running: list[Server]) -> None:
    """SIGKILL while two clients create as fast as they can, past the WAL checkpoints (every 1,000
    to 2,000 writes): after a restart on the same data dir every create answered 201 is there."""
    data = tmp_path / "data"
    running.append(s := start("--data-dir", str(data), log=tmp_path / "log"))
    cfg = yaml.safe_load(s.kubeconfig.read_text())
    ctx = ssl.create_default_context(cadata=base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"])
                                     .decode())
    token = s.token()
    answered: list[str] = []
    stop = threading.Event()

    def writer(prefix: str) -> None:
        for i in range(20_000):  # bounded; the kill ends it long before
            if stop.is_set():
                return
            name = f"{prefix}-{i}"
            body = json.dumps({"metadata": {"name": name}, "data": {"k": "v" * 200}}).encode()
            req = urllib.request.Request(s.url + "/api/v1/namespaces/default/configmaps", data=body, method="POST",
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                    if r.status == 201:
                        answered.append(name)
            except OSError:
                return  # the server is gone

    threads = [threading.Thread(target=writer, args=(p,)) for p in ("a", "b")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while len(answered) < 2500 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(s.proc.pid, signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join(30)
    s.proc.wait(10)
    assert len(answered) >= 2500
    running.append(s := start("--data-dir", str(data), log=tmp_path / "log"))
    status, doc = s.get("/api/v1/namespaces/default/configmaps", auth=f"Bearer {s.token()}")
    assert status == 200 and isinstance(doc, dict)
    stored = {o["metadata"]["name"] for o in doc["items"]}  # type: ignore[union-attr]
    assert set(answered) <= stored, sorted(set(answered) - stored)[:5]
    s.kubectl("create", "configmap", "after-the-kill", "--from-literal=k=v")


def test_reinitialize_starts_empty_and_keeps_the_damaged_file(initialised: Path, tmp_path: Path,
                                                              running: list[Server]) -> None:
    data = tmp_path / "data"
    shutil.copytree(initialised, data)
    junk = os.urandom(8192)
    (data / "state.db").write_bytes(junk)
    running.append(s := start("--data-dir", str(data), "--reinitialize", log=tmp_path / "log"))
    assert s.kubectl("get", "configmap", "keep", check=False).returncode != 0
    assert [p.read_bytes() for p in data.glob("state.db.unusable-*")] == [junk]


def test_generated_token_is_required_kept_across_restarts_and_works_with_kubectl(
        tmp_path: Path, running: list[Server]) -> None:
    data = tmp_path / "data"
    running.append(s := start("--data-dir", str(data), log=tmp_path / "log"))
    assert s.url.startswith("https://127.0.0.1:")
    token = s.token()
    assert token and (data / "token").read_text().strip() == token
    s.kubectl("create", "secret", "generic", "broker-token", "--from-literal=t=x")

    status, body = s.get("/api/v1/namespaces/default/secrets")
    assert status == 401 and isinstance(body, dict)
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Unauthorized", 401)
    # kube with --anonymous-auth=false: no credentials, no answer, /readyz included.
    assert s.get("/version")[0] == 401 and s.get("/readyz")[0] == 401
    assert s.get("/readyz", f"Bearer {token}") == (200, "ok")
    for scheme in ("bearer", "BEARER"):
        status, body = s.get("/api/v1/namespaces/default/secrets", f"{scheme} {token}")
        assert status == 200 and isinstance(body, dict) and body["kind"] == "SecretList"

    stop(s.proc)
    running.append(s2 := start("--data-dir", str(data), "--anonymous-auth", log=tmp_path / "log"))
    assert s2.token() == token
    s2.kubectl("get", "secret", "broker-token")
    # --anonymous-auth: RBAC opens what kube's system:public-info-viewer opens, nothing more.
    assert s2.get("/version")[0] == 200 and s2.get("/readyz") == (200, "ok")
    status, body = s2.get("/api/v1/namespaces/default/secrets")
    assert status == 403 and isinstance(body, dict)
    assert body["message"] == ('secrets is forbidden: User "system:anonymous" cannot list resource "secrets" in API '
                               'group "" in the namespace "default"')


def test_kubectl_create_token_works_and_the_signing_key_is_kept(tmp_path: Path, running: list[Server]) -> None:
    data = tmp_path / "data"
    running.append(s := start("--data-dir", str(data), log=tmp_path / "log"))
    s.kubectl("create", "serviceaccount", "bot")
    sa_token = s.kubectl("create", "token", "bot", "--duration=1h").stdout.strip()
    assert (data / "tls" / "sa.key").stat().st_mode & 0o777 == 0o600
    # Discovery: what every authenticated user may read (kube's system:discovery).
    status, body = s.get("/api", f"Bearer {sa_token}")
    assert status == 200 and isinstance(body, dict) and body["kind"] == "APIVersions"
    assert s.get("/api", "Bearer not-a-token")[0] == 401
    stop(s.proc)
    running.append(s2 := start("--data-dir", str(data), log=tmp_path / "log"))
    assert s2.get("/api", f"Bearer {sa_token}")[0] == 200


def test_without_data_dir_the_kubeconfig_is_private_and_removed_on_exit(tmp_path: Path,
                                                                         running: list[Server]) -> None:
    running.append(s := start(log=tmp_path / "log"))
    assert s.kubeconfig.stat().st_mode & 0o777 == 0o600
    assert s.kubeconfig.parent.stat().st_mode & 0o777 == 0o700
    assert "default" in s.kubectl("get", "namespaces", "-o", "name").stdout
    assert s.get("/api/v1/namespaces")[0] == 401
    stop(s.proc)
    assert not s.kubeconfig.parent.exists()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "example.com"])
def test_plain_http_beyond_loopback_is_refused(host: str) -> None:
    line = refused("--host", host, "--no-tls", "--port", "0")
    assert line.startswith(f"error: --host {host} is not a loopback address: serving beyond this machine "
                           "needs TLS")


def test_plain_http_on_any_loopback_address_still_needs_the_token(tmp_path: Path, running: list[Server]) -> None:
    kc = tmp_path / "kubeconfig"
    running.append(s := start("--host", "127.0.0.2", "--no-tls", "--kubeconfig-out", str(kc), log=tmp_path / "log"))
    assert s.url.startswith("http://127.0.0.2:") and s.kubeconfig == kc
    assert s.get("/api/v1/namespaces")[0] == 401
    assert s.get("/api/v1/namespaces", f"bearer {s.token()}")[0] == 200
