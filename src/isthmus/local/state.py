"""The state dir of a local clusterset: its layout and state.json.

state.json is what lets `status` and `down` work from another process, and `up` resume: the
size of the clusterset, the ports picked at first `up` (kept so kubeconfigs stay valid), what
setup has been done, and the PID of every process started (so only those are ever signalled).
The supervisor is its only writer; every write is atomic (temp file + rename) so a reader never
sees half a file.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_VERSION = 1

PHASE_STARTING = "starting"
PHASE_SETUP = "setup"
PHASE_RUNNING = "running"
PHASE_STOPPING = "stopping"
PHASE_STOPPED = "stopped"
PHASE_FAILED = "failed"


class StateError(Exception):
    """state.json is unreadable or from an incompatible version (the message is for users)."""


@dataclass(frozen=True)
class Layout:
    """Where everything lives under one (absolute) state dir."""

    root: Path

    @classmethod
    def at(cls, state_dir: str | os.PathLike[str]) -> Layout:
        return cls(Path(state_dir).expanduser().resolve())

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def kubeconfig(self) -> Path:
        """The merged kubeconfig: one context per cluster and the broker."""
        return self.root / "kubeconfig"

    @property
    def broker_info(self) -> Path:
        return self.root / "broker-info.subm"

    @property
    def supervisor_pid(self) -> Path:
        return self.root / "supervisor.pid"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, part: str) -> Path:
        return self.logs / f"{part}.log"

    def data_dir(self, name: str) -> Path:
        return self.root / name

    def token_file(self, name: str) -> Path:
        return self.data_dir(name) / "token"

    def kubeconfig_of(self, name: str) -> Path:
        return self.root / "kubeconfigs" / f"{name}.yaml"

    def exists(self) -> bool:
        return self.state_file.exists()


@dataclass
class PartState:
    pid: int | None = None
    restarts: int = 0
    last_exit: int | None = None
    started_at: float | None = None


@dataclass
class State:
    """The content of state.json (camelCase on disk, like the rest of the JSON users see)."""

    clusters: int
    enable_clusterset_ip: bool = False
    ports: dict[str, int] = field(default_factory=dict)
    broker_server: str | None = None
    """The broker URL broker-info.subm was written for; a different one means setup is redone."""
    joined: dict[str, str] = field(default_factory=dict)
    """Cluster → its ClusterSet IP CIDR, read back from its ServiceDiscovery after join."""
    setup_vip: bool | None = None
    """--enable-clusterset-ip as it was when setup last ran."""
    supervisor_pid: int | None = None
    phase: str = PHASE_STARTING
    error: str | None = None
    parts: dict[str, PartState] = field(default_factory=dict)
    updated_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        return {
            "version": STATE_VERSION,
            "clusters": d["clusters"],
            "enableClustersetIP": d["enable_clusterset_ip"],
            "ports": d["ports"],
            "setup": {"brokerServer": d["broker_server"], "joined": d["joined"], "clustersetIPEnabled": d["setup_vip"]},
            "supervisorPID": d["supervisor_pid"],
            "phase": d["phase"],
            "error": d["error"],
            "parts": {
                k: {"pid": v["pid"], "restarts": v["restarts"], "lastExit": v["last_exit"], "startedAt": v["started_at"]}
                for k, v in d["parts"].items()
            },
            "updatedAt": d["updated_at"],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> State:
        if d.get("version") != STATE_VERSION:
            raise StateError(f"state.json version {d.get('version')!r} is not {STATE_VERSION}")
        setup = d.get("setup") or {}
        return cls(
            clusters=int(d["clusters"]),
            enable_clusterset_ip=bool(d.get("enableClustersetIP", False)),
            ports={str(k): int(v) for k, v in (d.get("ports") or {}).items()},
            broker_server=setup.get("brokerServer"),
            joined={str(k): str(v) for k, v in (setup.get("joined") or {}).items()},
            setup_vip=setup.get("clustersetIPEnabled"),
            supervisor_pid=d.get("supervisorPID"),
            phase=str(d.get("phase", PHASE_STOPPED)),
            error=d.get("error"),
            parts={
                str(k): PartState(
                    pid=v.get("pid"), restarts=int(v.get("restarts", 0)), last_exit=v.get("lastExit"),
                    started_at=v.get("startedAt"),
                )
                for k, v in (d.get("parts") or {}).items()
            },
            updated_at=float(d.get("updatedAt", 0.0)),
        )

    def recorded_pids(self) -> dict[str, int]:
        """Every PID this state dir has recorded (parts and supervisor), by name."""
        out = {name: p.pid for name, p in self.parts.items() if p.pid}
        if self.supervisor_pid:
            out["supervisor"] = self.supervisor_pid
        return out


def load_state(layout: Layout) -> State | None:
    """state.json, or None when the dir has none yet."""
    try:
        text = layout.state_file.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StateError(f"cannot read {layout.state_file}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return State.from_json(data)
    except (ValueError, KeyError, TypeError) as e:
        raise StateError(f"{layout.state_file} is damaged ({e}); `isthmus down`, then remove the dir") from None


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write via a temp file in the same dir and rename: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_state(layout: Layout, state: State) -> None:
    state.updated_at = time.time()
    write_atomic(layout.state_file, json.dumps(state.to_json(), indent=2, sort_keys=False) + "\n")
