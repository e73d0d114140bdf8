"""kubectl v1.32 authenticating to `isthmus apiserver` with a token or a client certificate, and
finding the apiserver as workloads do (the `default/kubernetes` Service and its endpoints).

The server runs as a user runs it, with `--kubeconfig-auth cert`: its kubeconfig carries a client
certificate from the server's client CA; a second kubeconfig carries the bearer token instead.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from isthmus.apiserver.authentication.tls import issue_client_cert
from tests.harness.polling import eventually_sync

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")]


@dataclass
class Kubeconfigs:
    data: Path
    cert: Path
    token: Path

    def kubectl(self, kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", f"--cache-dir={kubeconfig}.cache", *args],
                           capture_output=True, text=True, timeout=30)
        assert not check or p.returncode == 0, f"kubectl {' '.join(args)}: {p.stderr}"
        return p


def with_user(src: Path, dst: Path, user: dict[str, str]) -> Path:
    cfg = copy.deepcopy(yaml.safe_load(src.read_text()))
    cfg["users"][0]["user"] = user
    dst.write_text(yaml.safe_dump(cfg))
    return dst


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubeconfigs]:
    data = tmp_path_factory.mktemp("apiserver")
    proc = subprocess.Popen(
        [sys.executable, "-m", "isthmus", "apiserver", "--port", "0", "--data-dir", str(data),
         "--kubeconfig-auth", "cert"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        kc = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if "kubeconfig written to" in line:
                kc = Path(line.strip().split()[-1])
                break
        assert kc is not None, proc.stderr.read() if proc.stderr else ""
        token = with_user(kc, data / "token-kubeconfig", {"token": (data / "token").read_text().strip()})
        yield Kubeconfigs(data, kc, token)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=10) == 0, "apiserver did not shut down cleanly on SIGTERM"
        finally:
            if proc.poll() is None:
                proc.kill()


def test_cert_kubeconfig_carries_a_client_certificate_and_no_token(server: Kubeconfigs) -> None:
    user = yaml.safe_load(server.cert.read_text())["users"][0]["user"]
    assert "token" not in user
    pem = base64.b64decode(user["client-certificate-data"]).decode()
    assert pem.startswith("-----BEGIN CERTIFICATE-----")
    assert "PRIVATE KEY" in base64.b64decode(user["client-key-data"]).decode()


def test_client_certificate_user_works_like_the_token_user(server: Kubeconfigs) -> None:
    k = server.kubectl
    assert "default" in k(server.cert, "get", "ns").stdout
    k(server.cert, "create", "configmap", "by-cert", "--from-literal=a=1")
    # What the certificate user wrote, the token user reads, and the other way round.
    assert k(server.token, "get", "configmap", "by-cert", "-o", "jsonpath={.data.a}").stdout == "1"
    k(server.token, "create", "configmap", "by-token", "--from-literal=b=2")
    assert k(server.cert, "get", "configmap", "by-token", "-o", "jsonpath={.data.b}").stdout == "2"
    k(server.cert, "delete", "configmap", "by-cert", "by-token")
    assert "NotFound" in k(server.token, "get", "configmap", "by-cert", check=False).stderr


def test_certificate_from_another_ca_is_unauthorized(server: Kubeconfigs, tmp_path: Path) -> None:
    # Same subject as the server's own client certificate, but issued by a CA the server never saw.
    cert, key = issue_client_cert(tmp_path / "other-ca", "admin", ["system:masters"])
    foreign = with_user(server.cert, tmp_path / "foreign", {
        "client-certificate-data": base64.b64encode(cert).decode(),
        "client-key-data": base64.b64encode(key).decode(),
    })
    p = server.kubectl(foreign, "get", "ns", check=False)
    assert p.returncode != 0
    assert "You must be logged in to the server" in p.stderr  # kubectl's words for a 401
    # On the wire: the handshake succeeds and the answer is kube's 401 Status.
    (tmp_path / "c.pem").write_bytes(cert)
    (tmp_path / "k.pem").write_bytes(key)
    cfg = yaml.safe_load(server.cert.read_text())["clusters"][0]["cluster"]
    ctx = ssl.create_default_context(cadata=base64.b64decode(cfg["certificate-authority-data"]).decode())
    ctx.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(cfg["server"] + "/api/v1/namespaces", context=ctx, timeout=10)
    assert e.value.code == 401
    assert json.loads(e.value.read())["reason"] == "Unauthorized"


def test_restart_keeps_the_client_certificate(server: Kubeconfigs) -> None:
    # The kubeconfig's certificate is stored in the data dir's TLS dir with the client CA.
    cfg = yaml.safe_load(server.cert.read_text())
    pem = base64.b64decode(cfg["users"][0]["user"]["client-certificate-data"])
    assert (server.data / "tls" / "admin.crt").read_bytes() == pem
    for name in ("client-ca.crt", "client-ca.key", "admin.crt", "admin.key"):
        assert (server.data / "tls" / name).stat().st_mode & 0o777 == 0o600


def test_cert_kubeconfig_needs_tls(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "isthmus", "apiserver", "--port", "0", "--no-tls",
                        "--kubeconfig-auth", "cert", "--kubeconfig-out", str(tmp_path / "kc")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert "--kubeconfig-auth cert needs TLS" in p.stderr
    assert not (tmp_path / "kc").exists()


def whoami(server: Kubeconfigs, kubeconfig: Path) -> dict[str, object]:
    out = json.loads(server.kubectl(kubeconfig, "auth", "whoami", "-o", "json").stdout)
    assert out["kind"] == "SelfSubjectReview"
    user: dict[str, object] = out["status"]["userInfo"]
    return user


def test_whoami_with_the_token(server: Kubeconfigs) -> None:
    table = server.kubectl(server.token, "auth", "whoami").stdout
    assert "admin" in table and "[system:masters system:authenticated]" in table
    assert whoami(server, server.token) == {"username": "admin", "groups": ["system:masters", "system:authenticated"]}


def test_whoami_with_client_certificates(server: Kubeconfigs, tmp_path: Path) -> None:
    # The server's own kubeconfig certificate is the token's user...
    assert whoami(server, server.cert) == {"username": "admin", "groups": ["system:masters", "system:authenticated"]}
    # ...and any certificate of its client CA is whoever its CN and Os say.
    cert, key = issue_client_cert(server.data / "tls", "jane", ["dev", "ops"])
    jane = with_user(server.cert, tmp_path / "jane", {
        "client-certificate-data": base64.b64encode(cert).decode(),
        "client-key-data": base64.b64encode(key).decode(),
    })
    table = server.kubectl(jane, "auth", "whoami").stdout
    assert "jane" in table and "[dev ops system:authenticated]" in table
    assert whoami(server, jane) == {"username": "jane", "groups": ["dev", "ops", "system:authenticated"]}


def token_review(server: Kubeconfigs, spec: dict[str, object]) -> dict[str, object]:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
    p = subprocess.run(["kubectl", f"--kubeconfig={server.cert}", f"--cache-dir={server.cert}.cache",
                        "create", "-f", "-", "-o", "json"], input=json.dumps(review),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    out: dict[str, object] = json.loads(p.stdout)
    return out


def test_token_review(server: Kubeconfigs) -> None:
    token = (server.data / "token").read_text().strip()
    good = token_review(server, {"token": token})
    assert good["status"] == {
        "authenticated": True,
        "user": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
        "audiences": ["https://kubernetes.default.svc.cluster.local"],
    }
    assert good["spec"] == {"token": token}  # kube answers with the review it was sent
    bad = token_review(server, {"token": token + "x"})
    assert bad["status"] == {"user": {}, "error": "invalid bearer token"}
    # The server's token is valid for the server's audiences only.
    other = token_review(server, {"token": token, "audiences": ["https://example.com"]})
    assert other["status"] == {"user": {}, "error": "invalid bearer token"}
    # Reviews are answers, not objects: nothing was stored.
    p = server.kubectl(server.cert, "get", "tokenreviews", check=False)
    assert p.returncode != 0


def server_port(server: Kubeconfigs) -> int:
    url = yaml.safe_load(server.cert.read_text())["clusters"][0]["cluster"]["server"]
    return int(url.rsplit(":", 1)[1])


def test_kubernetes_service_points_at_the_apiserver(server: Kubeconfigs) -> None:
    k, port = server.kubectl, server_port(server)
    table = k(server.token, "get", "svc", "kubernetes", "-n", "default").stdout
    assert "ClusterIP" in table and "443/TCP" in table
    svc = json.loads(k(server.token, "get", "svc", "kubernetes", "-n", "default", "-o", "json").stdout)
    assert svc["metadata"]["labels"] == {"component": "apiserver", "provider": "kubernetes"}
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]
    assert "selector" not in svc["spec"]  # its endpoints are the apiserver's own, not Pods'
    assert f"127.0.0.1:{port}" in k(server.token, "get", "endpoints", "kubernetes").stdout
    ep = json.loads(k(server.token, "get", "endpoints", "kubernetes", "-o", "json").stdout)
    assert ep["subsets"] == [{"addresses": [{"ip": "127.0.0.1"}],
                              "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]
    assert ep["metadata"]["labels"] == {"endpointslice.kubernetes.io/skip-mirror": "true"}
    eps = json.loads(k(server.token, "get", "endpointslice", "kubernetes", "-o", "json").stdout)
    assert eps["metadata"]["labels"] == {"kubernetes.io/service-name": "kubernetes"}
    assert eps["addressType"] == "IPv4"
    assert eps["endpoints"] == [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}]
    assert eps["ports"] == [{"name": "https", "port": port, "protocol": "TCP"}]


def test_kubernetes_service_and_endpoints_come_back(server: Kubeconfigs) -> None:
    k, port = server.kubectl, server_port(server)

    def uid(kind: str) -> str:
        p = k(server.token, "get", kind, "kubernetes", "-o", "jsonpath={.metadata.uid}", check=False)
        return p.stdout if p.returncode == 0 else ""

    kinds = ("service", "endpoints", "endpointslice")
    before = {kind: uid(kind) for kind in kinds}
    k(server.token, "delete", "service,endpoints,endpointslice", "kubernetes")
    eventually_sync(lambda: all(uid(kind) not in ("", before[kind]) for kind in kinds))
    assert f"127.0.0.1:{port}" in k(server.token, "get", "endpoints", "kubernetes").stdout
    # Ports someone changed are reset, as kube does (the Service is the apiserver's).
    k(server.token, "patch", "service", "kubernetes", "--type=merge",
      "-p", '{"spec": {"ports": [{"name": "https", "port": 8443, "targetPort": 1}]}}')
    eventually_sync(lambda: "443/TCP" in k(server.token, "get", "svc", "kubernetes").stdout
               and "8443" not in k(server.token, "get", "svc", "kubernetes").stdout)
