"""kubectl v1.32 against the in-process apiserver: `kind: List` apply (which needs /openapi/v2 as
protobuf) and `kubectl debug` (which needs kube's details on a 404 Status).

The server runs on the test's event loop, so kubectl runs as an asyncio subprocess.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.apiserver import RunningApiServer

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")]

LIST = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}, "data": {"a": "b"}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "svc1"},
            "spec": {"selector": {"app": "x"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    ],
}


async def kubectl(srv: RunningApiServer, cache: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={srv.kubeconfig}", f"--cache-dir={cache}", *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_apply_list_with_default_validation(apiserver: RunningApiServer, tmp_path: Path) -> None:
    """kubectl validates every item of a List client-side against /openapi/v2, which it reads as protobuf."""
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump(LIST))
    rc, out, err = await kubectl(apiserver, tmp_path / "cache", "apply", "-f", str(path))
    assert rc == 0, err
    assert "configmap/cm1 created" in out and "service/svc1 created" in out
    rc, out, err = await kubectl(apiserver, tmp_path / "cache", "get", "configmap", "cm1", "-o", "json")
    assert rc == 0, err
    assert json.loads(out)["data"] == {"a": "b"}


async def test_client_side_validation_reads_the_protobuf_schemas(apiserver: RunningApiServer, tmp_path: Path) -> None:
    """The protobuf document is really used: kubectl itself finds the unknown field in a List item."""
    bad: dict[str, Any] = {**LIST, "items": [{**LIST["items"][0], "bogus": 1}]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    rc, _, err = await kubectl(apiserver, tmp_path / "cache", "apply", "-f", str(path))
    assert rc == 1
    assert 'ValidationError(ConfigMap): unknown field "bogus" in io.k8s.api.core.v1.ConfigMap' in err


async def test_get_yaml_apply_round_trip(apiserver: RunningApiServer, tmp_path: Path) -> None:
    """`kubectl get ... -o yaml` prints a List; piping it back into apply must work."""
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump(LIST))
    cache = tmp_path / "cache"
    rc, _, err = await kubectl(apiserver, cache, "apply", "-f", str(path))
    assert rc == 0, err
    for fmt in ("yaml", "json"):
        rc, listed, err = await kubectl(apiserver, cache, "get", "configmap,service", "-o", fmt)
        assert rc == 0, err
        assert (yaml.safe_load(listed) if fmt == "yaml" else json.loads(listed))["kind"] == "List"
        rc, out, err = await kubectl(apiserver, cache, "apply", "-f", "-", stdin=listed)
        assert rc == 0, err
        assert "configmap/cm1" in out and "service/svc1" in out


async def test_debug_fails_cleanly_without_ephemeral_containers(apiserver: RunningApiServer, tmp_path: Path) -> None:
    """The server has no pods/ephemeralcontainers subresource. kubectl debug reads details.name of
    that 404 to tell "feature disabled" from "pod gone"; without details it panicked (exit 2)."""
    cache = tmp_path / "cache"
    rc, _, err = await kubectl(apiserver, cache, "run", "x", "--image=nginx")
    assert rc == 0, err
    rc, _, err = await kubectl(apiserver, cache, "debug", "pod/x", "-it", "--image=busybox")
    assert "panic" not in err and "goroutine" not in err, err
    assert rc == 1, err
    assert "ephemeral containers are disabled for this cluster" in err
