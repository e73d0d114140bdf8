"""The local clusterset's image registry: Debian's ``docker-registry`` (distribution 2.8).

In runc mode it serves plain HTTP at ``10.255.0.2:5000`` in the clusterset's fabric namespace,
storing under ``<state>/registry/data``; every node's kube-lite pulls through it as the mirror of
docker.io, ghcr.io, registry.k8s.io and quay.io (docs/images-pull.md). This module gives the pieces
the supervisor wires: the config file, the command line, a readiness check made from inside the
namespace (nothing on the host can reach 10.255.0.2), and pushing an OCI layout into it.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = [
    "DEFAULT_ADDR",
    "REGISTRY_BINARY",
    "RegistryError",
    "RegistryPaths",
    "argv",
    "is_ready",
    "layout_digest",
    "push",
    "registry_paths",
    "remote_digest",
    "wait_ready",
    "write_config",
]

REGISTRY_BINARY = "/usr/bin/docker-registry"
DEFAULT_ADDR = "10.255.0.2:5000"
SKOPEO = "skopeo"
NSENTER = "nsenter"
PUSH_TIMEOUT = 600.0


class RegistryError(Exception):
    """The registry is not answering, or a push failed (the message is for users)."""


@dataclass(frozen=True)
class RegistryPaths:
    root: Path
    """``<state>/registry``"""

    @property
    def config(self) -> Path:
        return self.root / "config.yml"

    @property
    def data(self) -> Path:
        return self.root / "data"


def registry_paths(state_dir: Path) -> RegistryPaths:
    return RegistryPaths(Path(state_dir) / "registry")


def write_config(state_dir: Path, addr: str = DEFAULT_ADDR, *, htpasswd: Path | None = None) -> Path:
    """Write the registry's config (filesystem storage, no auth unless ``htpasswd`` is given, delete
    enabled, warnings only, no access log); returns its path. Rewritten on every call: nothing in it
    is state (the HTTP secret only signs upload state, and one instance runs at a time)."""
    paths = registry_paths(state_dir)
    paths.data.mkdir(parents=True, exist_ok=True)
    config: dict[str, object] = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(paths.data)}, "delete": {"enabled": True}},
        "http": {"addr": addr, "secret": secrets.token_hex(16),
                 "headers": {"X-Content-Type-Options": ["nosniff"]}},
    }
    if htpasswd is not None:
        config["auth"] = {"htpasswd": {"realm": "isthmus", "path": str(htpasswd)}}
    tmp = paths.config.with_name(f".config.{os.getpid()}.yml")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    os.chmod(tmp, 0o600)
    os.replace(tmp, paths.config)
    return paths.config


def argv(config: Path) -> list[str]:
    """The registry's command line (the supervisor runs it inside the fabric namespace)."""
    return [REGISTRY_BINARY, "serve", str(config)]


def _netns_path(netns: str) -> str:
    return netns if "/" in netns else f"/run/netns/{netns}"


def _in_netns(netns: str | None, command: Sequence[str]) -> list[str]:
    return list(command) if netns is None else [NSENTER, f"--net={_netns_path(netns)}", "--", *command]


def _probe_here(addr: str) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        conn = http.client.HTTPConnection(host, int(port), timeout=2)
        conn.request("GET", "/v2/")
        return conn.getresponse().status == 200
    except OSError:
        return False


async def _probe_in(netns: str, addr: str) -> bool:
    """GET /v2/ over a connection made inside the namespace (the host has no route to it)."""
    from isthmus.runtime.netns import open_connection_in

    host, _, port = addr.rpartition(":")
    try:
        reader, writer = await open_connection_in(_netns_path(netns), host, int(port), timeout=2.0)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(f"GET /v2/ HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 2.0)
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
    parts = status.split()
    return len(parts) >= 2 and parts[1] == b"200"


async def is_ready(addr: str = DEFAULT_ADDR, *, netns: str | None = None) -> bool:
    """Does ``GET /v2/`` answer 200 (an open registry's API root)? Asked from inside ``netns``
    (name or path) when given."""
    if netns is None:
        return await asyncio.to_thread(_probe_here, addr)
    return await _probe_in(netns, addr)


async def wait_ready(addr: str = DEFAULT_ADDR, *, netns: str | None = None, within: float = 15.0) -> None:
    """Wait until the registry answers; RegistryError naming the address when it does not."""
    deadline = time.monotonic() + within
    while True:
        if await is_ready(addr, netns=netns):
            return
        if time.monotonic() > deadline:
            where = f" in network namespace {netns}" if netns else ""
            raise RegistryError(f"the registry at http://{addr}{where} did not answer GET /v2/ within {within:.0f}s")
        await asyncio.sleep(0.1)


def layout_digest(layout_dir: Path, ref_name: str) -> str:
    """The manifest digest an OCI layout names ``ref_name``; RegistryError when it names none."""
    try:
        index = json.loads((Path(layout_dir) / "index.json").read_text())
    except (OSError, ValueError) as e:
        raise RegistryError(f"{layout_dir}: not an OCI image layout ({e})") from None
    for m in index.get("manifests", []):
        if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") == ref_name:
            return str(m["digest"])
    raise RegistryError(f"{layout_dir}: no image named {ref_name!r}")


async def _run(command: Sequence[str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"})
    try:
        out, err = await asyncio.wait_for(proc.communicate(), PUSH_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return 124, "", f"{command[0]} did not finish in {PUSH_TIMEOUT:.0f}s"
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


async def remote_digest(registry_addr: str, repo_path: str, netns: str | None = None) -> str | None:
    """The digest of the manifest the registry holds for ``repo_path`` (``library/busybox:latest``),
    or None when it holds none."""
    code, out, _ = await _run(_in_netns(netns, [
        SKOPEO, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--no-creds",
        f"docker://{registry_addr}/{repo_path}"]))
    if code != 0:
        return None
    return "sha256:" + hashlib.sha256(out.encode()).hexdigest()


async def push(layout_dir: Path, ref_name: str, registry_addr: str, repo_path: str,
               netns: str | None = None) -> bool:
    """Push image ``ref_name`` of an OCI layout to ``registry_addr`` as ``repo_path``
    (``isthmus-net/isthmus:0.1.0``, the reference without its registry host), over plain HTTP,
    from inside ``netns``. Skipped (False) when the registry already holds that manifest digest;
    True after a push. RegistryError with skopeo's reason on failure."""
    want = layout_digest(layout_dir, ref_name)
    if await remote_digest(registry_addr, repo_path, netns) == want:
        return False
    code, _, err = await _run(_in_netns(netns, [
        SKOPEO, "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false", "--dest-no-creds",
        f"oci:{layout_dir}:{ref_name}", f"docker://{registry_addr}/{repo_path}"]))
    if code != 0:
        reason = err.strip().splitlines()[-1] if err.strip() else f"skopeo exited {code}"
        raise RegistryError(f"cannot push {ref_name} to {registry_addr}/{repo_path}: {reason}")
    return True
