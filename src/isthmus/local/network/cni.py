"""A pod's network through the real CNI plugins, as containerd's CRI plugin sets it up.

Per pod sandbox: `bridge` (with `host-local` IPAM) attaches the pod's namespace to the node's
bridge `cni0`, then `loopback` brings its `lo` up — the chain containerd runs for a
`bridge`-based conflist. The plugins run INSIDE the node's namespace (its cni0, its routes), never
the host's: `bridge` creates cni0 and the veth pair in the namespace it runs in, and moves one end
into CNI_NETNS.

The protocol is the CNI spec 1.0 for plugin execution: CNI_COMMAND / CNI_CONTAINERID / CNI_NETNS
/ CNI_IFNAME / CNI_PATH in the environment, the network configuration on stdin, a result (ADD) or
an error object `{"code", "msg", "details"}` on stdout. The ADD result is cached (as libcni caches
it under /var/lib/cni/results) and handed back as `prevResult` to CHECK and DEL.

Failures raise `CNIError` whose text is libcni's (``plugin type="bridge" failed (add): <msg>``);
`CNIError.sandbox_message(id)` is what containerd puts in front (the kubelet then reports
``Failed to create pod sandbox: rpc error: code = Unknown desc = <that>``, reason
``FailedCreatePodSandBox``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from isthmus.runtime import netns

__all__ = ["CNI_BIN", "CNIError", "PodNetwork"]

CNI_BIN = Path("/usr/lib/cni")
"""Debian's containernetworking-plugins put the plugins here (upstream's default is /opt/cni/bin)."""
CNI_VERSION = "1.0.0"
PLUGIN_TIMEOUT = 30.0
BRIDGE = "cni0"


class CNIError(RuntimeError):
    """A plugin failed; str() is libcni's message for it."""

    def __init__(self, plugin: str, command: str, msg: str, *, code: int | None = None, details: str = "") -> None:
        self.plugin = plugin
        self.command = command
        self.msg = msg
        self.code = code
        self.details = details
        text = f"{msg}; {details}" if details else msg
        super().__init__(f'plugin type="{plugin}" failed ({command.lower()}): {text}')

    def sandbox_message(self, sandbox_id: str) -> str:
        """containerd's words around it, as the kubelet shows them after
        "Failed to create pod sandbox: rpc error: code = Unknown desc = "."""
        verb = "setup" if self.command.upper() == "ADD" else "destroy"
        return f'failed to {verb} network for sandbox "{sandbox_id}": {self}'


def _node_path(node_netns: str) -> str:
    return node_netns if "/" in node_netns else netns.path(node_netns)


class PodNetwork:
    """The pod network of one node: its CNI configuration and where its state is kept.

    `node_netns` is the node namespace's name or path; `data_dir` holds host-local's allocations
    (``<data_dir>/<network name>/``) and the cached ADD results (``<data_dir>/results/``)."""

    def __init__(self, node_netns: str, pod_cidr: str, gateway: str, data_dir: Path,
                 cni_bin: Path = CNI_BIN, *, range_start: str | None = None, name: str | None = None) -> None:
        self.node_path = _node_path(node_netns)
        self.pod_cidr = pod_cidr
        self.gateway = gateway
        self.data_dir = Path(data_dir)
        self.cni_bin = Path(cni_bin)
        self.name = name or os.path.basename(self.node_path)
        """The network's name: host-local keeps its allocations under ``<data_dir>/<name>/``."""
        self.range_start = range_start or _second(pod_cidr)

    # --- configuration ------------------------------------------------------------------------

    def bridge_config(self) -> dict[str, Any]:
        return {
            "cniVersion": CNI_VERSION, "name": self.name, "type": "bridge", "bridge": BRIDGE,
            "isGateway": True, "ipMasq": False, "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": self.pod_cidr, "rangeStart": self.range_start, "gateway": self.gateway}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": str(self.data_dir),
            },
        }

    def loopback_config(self) -> dict[str, Any]:
        return {"cniVersion": CNI_VERSION, "name": "cni-loopback", "type": "loopback"}

    @property
    def store(self) -> Path:
        """host-local's allocations: one file per IP, named by the IP, holding the container id."""
        return self.data_dir / self.name

    def _result_file(self, container_id: str, ifname: str) -> Path:
        return self.data_dir / "results" / f"{self.name}-{container_id}-{ifname}"

    # --- execution ----------------------------------------------------------------------------

    async def _exec(self, command: str, config: dict[str, Any], pod_netns_path: str, container_id: str,
                    ifname: str, args: Mapping[str, str] | None) -> dict[str, Any]:
        plugin = str(config["type"])
        binary = self.cni_bin / plugin
        if not binary.exists():
            raise CNIError(plugin, command, f'failed to find plugin "{plugin}" in path [{self.cni_bin}]')
        env = {
            "CNI_COMMAND": command, "CNI_CONTAINERID": container_id, "CNI_NETNS": pod_netns_path,
            "CNI_IFNAME": ifname, "CNI_PATH": str(self.cni_bin),
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        }
        if args:
            env["CNI_ARGS"] = ";".join(f"{k}={v}" for k, v in args.items())
        try:
            done = await netns.run_in(self.node_path, [str(binary)], input=json.dumps(config).encode(), env=env,
                                      timeout=PLUGIN_TIMEOUT)
        except TimeoutError:
            raise CNIError(plugin, command, f"plugin timed out after {PLUGIN_TIMEOUT:g}s") from None
        except OSError as err:  # the node namespace is gone, or the binary cannot run
            raise CNIError(plugin, command, str(err)) from None
        out = done.stdout.decode(errors="replace").strip()
        if done.returncode != 0:
            try:
                obj = json.loads(out)
                raise CNIError(plugin, command, str(obj.get("msg", "")), code=obj.get("code"),
                               details=str(obj.get("details", "")))
            except (ValueError, AttributeError):
                msg = out or done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
                raise CNIError(plugin, command, f"netplugin failed: {msg!r}") from None
        if not out:
            return {}
        try:
            result = json.loads(out)
        except ValueError:
            raise CNIError(plugin, command, f"decoding version from network config: {out[:200]!r}") from None
        return result if isinstance(result, dict) else {}

    async def add(self, pod_netns_path: str, container_id: str, ifname: str = "eth0",
                  args: Mapping[str, str] | None = None) -> str:
        """CNI ADD: attach the pod's namespace to cni0 and bring its lo up; the pod's IP."""
        result: dict[str, Any]
        result, _ = await asyncio.gather(
            self._exec("ADD", self.bridge_config(), pod_netns_path, container_id, ifname, args),
            self._exec("ADD", self.loopback_config(), pod_netns_path, container_id, "lo", args),
        )
        ips = result.get("ips") or []
        if not ips:
            raise CNIError("bridge", "ADD", "the plugin returned no IP address")
        cache = self._result_file(container_id, ifname)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(result))
        return str(ips[0]["address"]).split("/", 1)[0]

    def _cached(self, container_id: str, ifname: str) -> dict[str, Any] | None:
        try:
            obj = json.loads(self._result_file(container_id, ifname).read_text())
        except (OSError, ValueError):
            return None
        return obj if isinstance(obj, dict) else None

    async def delete(self, pod_netns_path: str, container_id: str, ifname: str = "eth0",
                     args: Mapping[str, str] | None = None) -> None:
        """CNI DEL: release the IP and remove the veth (idempotent: a second DEL, or one after the
        namespace went away, succeeds)."""
        config = self.bridge_config()
        prev = self._cached(container_id, ifname)
        if prev is not None:
            config["prevResult"] = prev
        present = os.path.exists(pod_netns_path)  # noqa: ASYNC240 - one stat, no I/O wait
        # A namespace already gone: the plugins must not try to enter it (the spec's empty CNI_NETNS).
        path = pod_netns_path if present else ""
        jobs = [self._exec("DEL", config, path, container_id, ifname, args)]
        if present:
            jobs.append(self._exec("DEL", self.loopback_config(), path, container_id, "lo", args))
        await asyncio.gather(*jobs)
        with contextlib.suppress(FileNotFoundError):
            self._result_file(container_id, ifname).unlink()

    async def check(self, pod_netns_path: str, container_id: str, ifname: str = "eth0",
                    args: Mapping[str, str] | None = None) -> None:
        """CNI CHECK: the pod's interface, address and routes are still as ADD left them."""
        prev = self._cached(container_id, ifname)
        if prev is None:
            raise CNIError("bridge", "CHECK", f"no cached result for container {container_id}: was ADD run?")
        config = self.bridge_config() | {"prevResult": prev}
        await self._exec("CHECK", config, pod_netns_path, container_id, ifname, args)

    # --- a pod sandbox's whole network --------------------------------------------------------

    async def attach(self, pod_netns: str, sandbox_id: str, args: Mapping[str, str] | None = None) -> tuple[str, str]:
        """Create the pod's namespace (by name) and ADD it: (its path, the pod IP). On failure the
        namespace is removed again and the CNIError raised.

        A namespace already attached for this sandbox (kube-lite restarted before it recorded the
        IP) passes CNI CHECK and keeps its address; one that fails CHECK is DEL'ed and added anew."""
        existed = await asyncio.to_thread(netns.exists, pod_netns)
        path = await asyncio.to_thread(netns.add, pod_netns)
        prev = self._cached(sandbox_id, "eth0") if existed else None
        if prev is not None and prev.get("ips"):
            try:
                await self.check(path, sandbox_id, args=args)
                return path, str(prev["ips"][0]["address"]).split("/", 1)[0]
            except CNIError:
                await self.delete(path, sandbox_id, args=args)
        try:
            return path, await self.add(path, sandbox_id, args=args)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.delete(path, sandbox_id, args=args)
            with contextlib.suppress(netns.NetnsError):
                await asyncio.to_thread(netns.delete, pod_netns)
            raise

    async def detach(self, pod_netns: str, sandbox_id: str, args: Mapping[str, str] | None = None) -> None:
        """DEL the pod's network, then remove its namespace (idempotent)."""
        await self.delete(netns.path(pod_netns), sandbox_id, args=args)
        await asyncio.to_thread(netns.delete, pod_netns)

    def allocated(self) -> dict[str, str]:
        """host-local's allocations: IP → container id."""
        out: dict[str, str] = {}
        try:
            entries = list(self.store.iterdir())
        except FileNotFoundError:
            return out
        for entry in entries:
            if entry.name[:1].isdigit() and not entry.name.startswith("last_reserved_ip"):
                with contextlib.suppress(OSError):
                    out[entry.name] = entry.read_text().splitlines()[0].strip()
        return out


def _second(cidr: str) -> str:
    """The range's first address after the gateway (.0.2 of the pod CIDR)."""
    import ipaddress

    return str(ipaddress.ip_network(cidr).network_address + 2)
