"""`isthmus demo` (interim): a scripted tour of the embedded API server with kubectl.

Until the local clusterset exists, the tour shows the floor everything stands on: a real
`isthmus apiserver` process (TLS, bearer token, SQLite), our CRDs served as soon as they are
applied, kubectl working against it, validation errors where the user looks, and state that
survives a restart. Each step either passes or names itself as the failure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

SERVICE = """
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: demo}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata:
  name: echo
  namespace: demo
  annotations: {lighthouse.submariner.io/use-clusterset-ip: "true"}
"""

BAD_IMPORT = """
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: broken, namespace: demo}
spec:
  type: Anycast
  ports: [{port: 99999, protocol: TCP}]
"""


class StepFailed(Exception):
    pass


class Demo:
    def __init__(self, console: Console, workdir: Path) -> None:
        self.console = console
        self.workdir = workdir
        self.data = workdir / "apiserver"
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    # -- helpers
    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(
            ["kubectl", f"--kubeconfig={self.data / 'kubeconfig'}", f"--cache-dir={self.workdir / 'cache'}", *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )
        if check and p.returncode != 0:
            raise StepFailed(f"kubectl {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
        return p

    def show(self, text: str) -> None:
        for line in text.rstrip().splitlines():
            self.console.print(f"    [dim]{line}[/dim]", highlight=False)

    def start_server(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "isthmus", "apiserver", "--port", "0", "--data-dir", str(self.data), "--tls",
             "--token-file", str(self.data / "token"), "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if "listening on" in line:
                self.url = line.split()[-1]
                return
        err = self.proc.stderr.read() if self.proc.stderr else ""
        raise StepFailed(f"apiserver did not start: {err.strip()}")

    def stop_server(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                code = self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise StepFailed("apiserver did not stop on SIGTERM") from None
            self.proc = None
            if code != 0:
                raise StepFailed(f"apiserver exited with {code} on SIGTERM")

    # -- steps
    def step_start(self) -> None:
        self.start_server()
        self.console.print(f"    apiserver at [bold]{self.url}[/bold] (TLS, bearer token, SQLite in {self.data})")
        self.show(self.kubectl("version").stdout)

    def step_crds(self) -> None:
        from isthmus.api.crdgen import all_crds, to_yaml

        self.kubectl("apply", "-f", "-", stdin=to_yaml(all_crds()))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=30s")
        self.show(self.kubectl("get", "crds").stdout)

    def step_export(self) -> None:
        self.kubectl("apply", "-f", "-", stdin=SERVICE)
        self.show(self.kubectl("get", "svc,serviceexports", "-n", "demo").stdout)

    def step_status(self) -> None:
        cond = {"type": "Ready", "status": "True", "reason": "Exported", "message": "demo",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        waiter = subprocess.Popen(
            ["kubectl", f"--kubeconfig={self.data / 'kubeconfig'}", f"--cache-dir={self.workdir / 'cache'}",
             "wait", "--for=condition=Ready", "serviceexport/echo", "-n", "demo", "--timeout=30s"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)
        self.kubectl("patch", "serviceexport", "echo", "-n", "demo", "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": {"conditions": [cond]}}))
        out, err = waiter.communicate(timeout=40)
        if waiter.returncode != 0:
            raise StepFailed(f"kubectl wait: {err.strip()}")
        self.show(out)

    def step_invalid(self) -> None:
        p = self.kubectl("apply", "-f", "-", stdin=BAD_IMPORT, check=False)
        if p.returncode == 0 or "is invalid" not in p.stderr:
            raise StepFailed("an invalid ServiceImport was accepted")
        self.show(p.stderr)
        if self.kubectl("get", "serviceimport", "broken", "-n", "demo", check=False).returncode == 0:
            raise StepFailed("the invalid ServiceImport was stored")

    def step_restart(self) -> None:
        before = json.loads(self.kubectl("get", "serviceexport", "echo", "-n", "demo", "-o", "json").stdout)
        self.stop_server()
        self.start_server()
        after = json.loads(self.kubectl("get", "serviceexport", "echo", "-n", "demo", "-o", "json").stdout)
        for field in ("uid", "resourceVersion"):
            if before["metadata"][field] != after["metadata"][field]:
                raise StepFailed(f"metadata.{field} changed across the restart")
        self.console.print(f"    serviceexport/echo kept uid {after['metadata']['uid'][:8]}… and "
                           f"resourceVersion {after['metadata']['resourceVersion']} across the restart")

    def step_cleanup(self) -> None:
        self.kubectl("delete", "namespace", "demo", "--timeout=30s")
        if self.kubectl("get", "namespace", "demo", check=False).returncode == 0:
            raise StepFailed("namespace demo still exists")
        self.console.print("    namespace demo and everything in it deleted")


def run_demo(console: Console | None = None) -> int:
    """Run every step; 0 when all pass, 1 naming the failed step otherwise."""
    console = console or Console()
    if shutil.which("kubectl") is None:
        console.print("[red]kubectl is required for the demo (it is the client users have)[/red]")
        return 1
    console.rule("[bold]Isthmus demo[/bold] — the embedded Kubernetes-compatible API server")
    with tempfile.TemporaryDirectory(prefix="isthmus-demo-") as tmp:
        demo = Demo(console, Path(tmp))
        steps: list[tuple[str, Callable[[], None]]] = [
            ("start isthmus apiserver", demo.step_start),
            ("install the Isthmus CRDs", demo.step_crds),
            ("apply a Service and its ServiceExport", demo.step_export),
            ("set status, kubectl wait --for=condition=Ready", demo.step_status),
            ("invalid input is rejected with field paths", demo.step_invalid),
            ("restart: state and resourceVersions survive", demo.step_restart),
            ("delete the namespace and its contents", demo.step_cleanup),
        ]
        try:
            for i, (title, fn) in enumerate(steps, 1):
                console.print(f"[bold cyan]{i}.[/bold cyan] {title}")
                t0 = time.monotonic()
                try:
                    fn()
                except (StepFailed, subprocess.TimeoutExpired) as e:
                    console.print(f"[bold red]✗ step {i} failed: {title}[/bold red]\n  {e}")
                    return 1
                console.print(f"  [green]✓[/green] [dim]{time.monotonic() - t0:.2f}s[/dim]")
        finally:
            try:
                demo.stop_server()
            except StepFailed as e:
                console.print(f"[red]{e}[/red]")
    console.rule("[green]all steps passed[/green]")
    return 0
