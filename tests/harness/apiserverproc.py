"""An `isthmus apiserver` process with kubectl, lightkube and a bare HTTP client pointed at it:
what the API-surface tests (and the Binding, Eviction, generation and OpenAPI v3 ones) talk to."""

from __future__ import annotations

import base64
import json
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client, KubeConfig

__all__ = ["Http", "Response", "Server"]


class Response:
    def __init__(self, status_code: int, body: bytes) -> None:
        self.status_code = status_code
        self.text = body.decode()

    def json(self) -> Any:
        return json.loads(self.text)


class Http:
    """Raw requests with the server's CA and token (what kubectl and lightkube hide)."""

    def __init__(self, url: str, ctx: ssl.SSLContext, token: str) -> None:
        self.url, self.ctx, self.token = url, ctx, token

    def request(self, method: str, path: str, body: Any = None, ctype: str = "application/json") -> Response:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}", "Content-Type": ctype})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
                return Response(r.status, r.read())
        except urllib.error.HTTPError as e:
            return Response(e.code, e.read())

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def delete(self, path: str) -> Response:
        return self.request("DELETE", path)

    def post(self, path: str, json: Any) -> Response:
        return self.request("POST", path, json)

    def put(self, path: str, json: Any) -> Response:
        return self.request("PUT", path, json)

    def patch(self, path: str, json: Any, ctype: str = "application/merge-patch+json") -> Response:
        return self.request("PATCH", path, json, ctype)


class Server:
    """An `isthmus apiserver` process, with kubectl and lightkube pointed at it."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "isthmus", "apiserver", "--port", "0", "--data-dir", str(data), "--tls",
             "--token-file", str(data / "token")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        url = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if "listening on" in line:
                url = line.strip().split()[-1]
                break
        assert url, self.proc.stderr.read() if self.proc.stderr else ""
        self.url = url
        self.kubeconfig = data / "kubeconfig"
        while not self.kubeconfig.exists():
            time.sleep(0.05)
        cfg = yaml.safe_load(self.kubeconfig.read_text())
        token = cfg["users"][0]["user"]["token"]
        ca = Path(tempfile.mkstemp(dir=data, suffix=".crt")[1])
        ca.write_bytes(base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"]))
        self.http = Http(url, ssl.create_default_context(cafile=str(ca)), token)
        self.client = Client(config=KubeConfig.from_file(str(self.kubeconfig)), field_manager="conformance")

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.data / 'cache'}",
                            *args], input=stdin, capture_output=True, text=True, timeout=60)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def get(self, path: str) -> Any:
        r = self.http.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()

    def stop(self) -> None:
        self.client._client._client.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
