"""A tiny read-only HTTP server that serves recorded kube discovery documents.

It serves the documents of ``src/isthmus/apiserver/data/discovery-v1.32.json`` (or any
``{"documents": {path: body}}`` mapping) at their paths, plus ``/version``, over plain
HTTP on 127.0.0.1 with no authentication.  Discovery is served unaggregated
(``Content-Type: application/json`` whatever the ``Accept`` header asks), so a client
such as ``kubectl api-resources`` falls back to ``/api``, ``/apis`` and one request per
group/version, which exercises exactly the documents we keep.

Use it from a test::

    with serve(load_discovery()) as url:
        write_kubeconfig(tmp_path / "kubeconfig", url)

or by hand: ``python -m tests.reference.fake_discovery`` prints a kubeconfig path and
serves until interrupted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DISCOVERY_JSON = REPO_ROOT / "src" / "isthmus" / "apiserver" / "data" / "discovery-v1.32.json"
REFERENCE_API_RESOURCES = Path(__file__).resolve().parent / "kubectl_api_resources_v1_32.txt"

VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def load_discovery(path: Path = DISCOVERY_JSON) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def preferred_resources(discovery: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(group, groupVersion, resource) for every top-level resource, the way client-go's
    ServerPreferredResources picks them: groups in /api, /apis order, each group's versions in
    the order served (preferred first), a resource name kept from the first version having it."""
    docs = discovery["documents"]
    out: list[tuple[str, str, dict[str, Any]]] = []
    groups = [("", [v]) for v in docs["/api"]["versions"]]
    groups += [(g["name"], [v["groupVersion"] for v in g["versions"]]) for g in docs["/apis"]["groups"]]
    for group, group_versions in groups:
        seen: set[str] = set()
        for gv in group_versions:
            path = f"/api/{gv}" if group == "" else f"/apis/{gv}"
            for res in docs[path]["resources"]:
                if "/" in res["name"] or res["name"] in seen:
                    continue
                seen.add(res["name"])
                out.append((group, gv, res))
    return out


def render_api_resources(discovery: Mapping[str, Any]) -> str:
    """What `kubectl api-resources` (v1.32, default columns) prints for these documents:
    rows sorted by group then name, laid out like kubectl's tabwriter (min width 6, padding 3)."""
    rows = [
        (res["name"], ",".join(res.get("shortNames") or []), gv, str(res["namespaced"]).lower(), res["kind"])
        for group, gv, res in sorted(preferred_resources(discovery), key=lambda t: (t[0], t[2]["name"]))
    ]
    table = [("NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"), *rows]
    widths = [max(6, max(len(row[i]) for row in table) + 3) for i in range(4)]
    return "".join(
        "".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + row[4] + "\n"
        for row in table
    )


def _handler(routes: Mapping[str, bytes]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            body = routes.get(path)
            if body is None:
                status = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "the server could not find the requested resource",
                    "reason": "NotFound",
                    "details": {},
                    "code": 404,
                }
                self._send(404, json.dumps(status).encode())
            else:
                self._send(200, body)

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve(discovery: Mapping[str, Any]) -> Iterator[str]:
    """Serve ``discovery["documents"]`` on 127.0.0.1 (random port); yield the base URL."""
    routes = {path: json.dumps(doc).encode() for path, doc in discovery["documents"].items()}
    routes["/version"] = json.dumps(VERSION_INFO).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(routes))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="fake-discovery", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def write_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "fake", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        ),
        encoding="utf-8",
    )
    return path


def kubectl_minor_version(kubectl: str) -> str | None:
    """The client's "major.minor" (e.g. "1.32"), or None if it cannot be told."""
    try:
        out = subprocess.run(
            [kubectl, "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        info = json.loads(out)["clientVersion"]
        return f"{info['major']}.{info['minor'].rstrip('+')}"
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return None


def run_kubectl_api_resources(kubectl: str, url: str, workdir: Path, *args: str) -> str:
    """`kubectl api-resources` against `url`, with its config and caches kept under `workdir`."""
    kubeconfig = write_kubeconfig(workdir / "kubeconfig", url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update(HOME=str(workdir), KUBECONFIG=str(kubeconfig), NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    proc = subprocess.run(
        [kubectl, "api-resources", f"--cache-dir={workdir / 'cache'}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl api-resources failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout


def main() -> int:
    kubectl = shutil.which("kubectl")
    with tempfile.TemporaryDirectory(prefix="fake-discovery-") as tmp, serve(load_discovery()) as url:
        if len(sys.argv) > 1 and sys.argv[1] == "api-resources":
            if kubectl is None:
                print("kubectl not found", file=sys.stderr)
                return 1
            sys.stdout.write(run_kubectl_api_resources(kubectl, url, Path(tmp), *sys.argv[2:]))
            return 0
        kubeconfig = write_kubeconfig(Path(tmp) / "kubeconfig", url)
        print(
            f"serving {DISCOVERY_JSON.name} at {url}; kubeconfig: {kubeconfig} (Ctrl-C to stop)", flush=True
        )
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
