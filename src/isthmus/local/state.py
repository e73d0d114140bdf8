"""The state dir of a local clusterset: its layout and state.json.

state.json is what lets `status` and `down` work from another process, and `up` resume: the
size of the clusterset, the ports picked at first `up` (kept so kubeconfigs stay valid), what
setup has been done, and the PID of every process started (so only those are ever signalled).
The supervisor is its only writer; every write is atomic (temp file + rename) so a reader never
sees half a file.

The state dir holds tokens (in kubeconfigs, broker-info and each apiserver's data): everything
`up` writes is private to its user, directories 0700 and files 0600, and `up` fixes the modes
of an existing state dir at start.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

STATE_VERSION = 1
DIR_MODE = 0o700
FILE_MODE = 0o600

PHASE_STARTING = "starting"
PHASE_SETUP = "setup"
PHASE_IMAGES = "images"
"""runc mode: building (or finding in the cache) and pushing the images the pods run."""
PHASE_RUNNING = "running"
PHASE_STOPPING = "stopping"
PHASE_STOPPED = "stopped"
PHASE_FAILED = "failed"
PHASES = (PHASE_STARTING, PHASE_SETUP, PHASE_IMAGES, PHASE_RUNNING, PHASE_STOPPING, PHASE_STOPPED, PHASE_FAILED)


class StateError(Exception):
    """state.json is unreadable, damaged or from an incompatible version (the message is for users).

    `problem` is the message without the hint that `isthmus down` still works (for `down` itself).
    """

    def __init__(self, problem: str, hint: str = "") -> None:
        super().__init__(f"{problem} ({hint})" if hint else problem)
        self.problem = problem


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

    @property
    def kubeconfigs(self) -> Path:
        return self.root / "kubeconfigs"

    def log(self, part: str) -> Path:
        return self.logs / f"{part}.log"

    def data_dir(self, name: str) -> Path:
        return self.root / name

    def token_file(self, name: str) -> Path:
        return self.data_dir(name) / "token"

    def kubeconfig_of(self, name: str) -> Path:
        return self.kubeconfigs / f"{name}.yaml"

    def exists(self) -> bool:
        return self.state_file.exists()


# --- private modes -------------------------------------------------------------------------------


def private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) 0700, or make an existing one 0700."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    _chmod(path, DIR_MODE)
    return path


def _chmod(path: Path, mode: int) -> None:
    """chmod without following a symlink (a link planted in the state dir must not redirect it)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == mode:
        return
    os.chmod(path, mode)


def open_private(path: Path, flags: int) -> int:
    """os.open a file 0600 (an existing one is made 0600 too)."""
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd


def secure_state_dir(layout: Layout, data_dirs: list[str]) -> None:
    """Make the state dir private: the dirs `up` owns 0700 and the files it wrote 0600.

    Only what `up` creates is touched (a --state-dir may be an existing dir of the user's); each
    apiserver makes the inside of its own data dir private, `up` the dir and its token.
    """
    private_dir(layout.root)
    for d in (layout.logs, layout.kubeconfigs):
        if d.is_dir() and not d.is_symlink():
            _chmod(d, DIR_MODE)
            for f in d.iterdir():
                if f.is_file():
                    _chmod(f, FILE_MODE)
    for f in (layout.state_file, layout.kubeconfig, layout.broker_info, layout.supervisor_pid):
        _chmod(f, FILE_MODE)
    for name in data_dirs:
        d = layout.data_dir(name)
        if d.is_dir() and not d.is_symlink():
            _chmod(d, DIR_MODE)
            _chmod(layout.token_file(name), FILE_MODE)


# --- state.json ----------------------------------------------------------------------------------


@dataclass
class PartState:
    pid: int | None = None
    restarts: int = 0
    last_exit: int | None = None
    started_at: float | None = None
    last_error: str | None = None
    """The last line a run that ended printed (its `error: ...` line when it had one)."""
    failed: bool = False
    """The supervisor gave up on it: it kept refusing to start (see supervisor.GIVE_UP_AFTER)."""
    standby: bool = False
    """Started on first use (`PartSpec.listen`): the supervisor listens for it, no process runs."""


@dataclass
class State:
    """The content of state.json (camelCase on disk, like the rest of the JSON users see)."""

    clusters: int
    enable_clusterset_ip: bool = False
    runtime: str = "process"
    """`up --runtime`: fixed when the state dir is made (the address plans differ)."""
    nodes: int = 1
    """`up --nodes`: nodes per member cluster, fixed when the state dir is made (the pod CIDR slices differ)."""
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
            "runtime": d["runtime"],
            "nodes": d["nodes"],
            "ports": d["ports"],
            "setup": {"brokerServer": d["broker_server"], "joined": d["joined"], "clustersetIPEnabled": d["setup_vip"]},
            "supervisorPID": d["supervisor_pid"],
            "phase": d["phase"],
            "error": d["error"],
            "parts": {
                k: {"pid": v["pid"], "restarts": v["restarts"], "lastExit": v["last_exit"], "startedAt": v["started_at"],
                    "lastError": v["last_error"], "failed": v["failed"], "standby": v["standby"]}
                for k, v in d["parts"].items()
            },
            "updatedAt": d["updated_at"],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> State:
        """Parse and check every value; a bad one raises ValueError naming its key and value."""
        r = _Reader(d)
        version = d.get("version")
        if version != STATE_VERSION:
            raise StateError(f"version {version!r} is not {STATE_VERSION}")
        from isthmus.local.plan import MAX_CLUSTERS, MAX_NODES, RUNTIMES

        clusters = r.int_("clusters", low=1, high=MAX_CLUSTERS)
        setup = r.obj("setup")
        parts = {}
        for name, raw in r.obj("parts").items():
            if not isinstance(raw, dict):
                _bad(f"parts.{name}", raw, "an object")
            p = _Reader(raw, f"parts.{name}")
            parts[str(name)] = PartState(
                pid=p.pid("pid"), restarts=p.int_("restarts", low=0, default=0), last_exit=p.opt_int("lastExit"),
                started_at=p.opt_num("startedAt"), last_error=p.opt_str("lastError"),
                failed=p.bool_("failed", default=False), standby=p.bool_("standby", default=False),
            )
        s = _Reader(setup, "setup")
        return cls(
            clusters=clusters,
            enable_clusterset_ip=r.bool_("enableClustersetIP", default=False),
            runtime=r.choice("runtime", RUNTIMES, default="process"),
            nodes=r.int_("nodes", low=1, high=MAX_NODES, default=1),
            ports={str(k): r.port(f"ports.{k}", v) for k, v in r.obj("ports").items()},
            broker_server=s.opt_str("brokerServer"),
            joined={str(k): s.str_(f"joined.{k}", v) for k, v in s.obj("joined").items()},
            setup_vip=s.opt_bool("clustersetIPEnabled"),
            supervisor_pid=r.pid("supervisorPID"),
            phase=r.choice("phase", PHASES, default=PHASE_STOPPED),
            error=r.opt_str("error"),
            parts=parts,
            updated_at=r.opt_num("updatedAt") or 0.0,
        )

    def recorded_pids(self) -> dict[str, int]:
        """Every PID this state dir has recorded (parts and supervisor), by name."""
        out = {name: p.pid for name, p in self.parts.items() if p.pid}
        if self.supervisor_pid:
            out["supervisor"] = self.supervisor_pid
        return out


_MISSING = object()


def _bad(key: str, value: object, want: str) -> NoReturn:
    shown = json.dumps(value)
    raise ValueError(f"{key} is {shown if len(shown) <= 60 else shown[:57] + '...'}, not {want}")


class _Reader:
    """Typed access to one JSON object of state.json; errors name the dotted key and the value."""

    def __init__(self, d: dict[str, Any], prefix: str = "") -> None:
        self.d, self.prefix = d, prefix

    def _key(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def bad(self, key: str, value: object, want: str) -> NoReturn:
        _bad(self._key(key), value, want)

    def get(self, key: str, default: object = _MISSING) -> Any:
        if key not in self.d:
            if default is _MISSING:
                raise ValueError(f"{self._key(key)} is missing")
            return default
        return self.d[key]

    def int_(self, key: str, low: int, high: int | None = None, default: object = _MISSING) -> int:
        v = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
            self.bad(key, v, f"a whole number {low}-{high}" if high else f"a whole number >= {low}")
        return int(v)

    def opt_int(self, key: str) -> int | None:
        v = self.get(key, None)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            self.bad(key, v, "a whole number or null")
        return v

    def pid(self, key: str) -> int | None:
        v = self.get(key, None)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            self.bad(key, v, "a process ID or null")
        return v

    def port(self, key: str, v: object) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
            _bad(key, v, "a port (1-65535)")
        return v

    def opt_num(self, key: str) -> float | None:
        v = self.get(key, None)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            self.bad(key, v, "a number or null")
        return None if v is None else float(v)

    def bool_(self, key: str, default: object = _MISSING) -> bool:
        v = self.get(key, default)
        if not isinstance(v, bool):
            self.bad(key, v, "true or false")
        return v

    def opt_bool(self, key: str) -> bool | None:
        v = self.get(key, None)
        if v is not None and not isinstance(v, bool):
            self.bad(key, v, "true, false or null")
        return v

    def str_(self, key: str, v: object) -> str:
        if not isinstance(v, str):
            self.bad(key, v, "a string")
        return v

    def opt_str(self, key: str) -> str | None:
        v = self.get(key, None)
        if v is not None and not isinstance(v, str):
            self.bad(key, v, "a string or null")
        return v

    def choice(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        v = self.get(key, default)
        if v not in allowed:
            self.bad(key, v, "one of " + ", ".join(allowed))
        return str(v)

    def obj(self, key: str) -> dict[str, Any]:
        v = self.get(key, None)
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.bad(key, v, "an object")
        return v


def _damaged(layout: Layout, why: str) -> StateError:
    # Never advise removing the state dir: it holds every cluster's data.
    return StateError(f"{layout.state_file} is damaged: {why}; fix or restore that value",
                      f"`isthmus down --state-dir {layout.root}` still stops the processes it can verify")


def load_state(layout: Layout) -> State | None:
    """state.json, or None when the dir has none yet; StateError when it cannot be used."""
    try:
        text = layout.state_file.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise StateError(f"cannot read {layout.state_file}: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise _damaged(layout, f"not JSON ({e})") from None
    if not isinstance(data, dict):
        raise _damaged(layout, "not a JSON object")
    try:
        return State.from_json(data)
    except StateError as e:
        raise StateError(f"{layout.state_file}: {e}") from None
    except ValueError as e:
        raise _damaged(layout, str(e)) from None


def salvage_pids(layout: Layout) -> dict[str, int]:
    """Every well-formed PID in a state.json too damaged to load (for `down`): parts by name and
    the supervisor. They are still only signalled after `is_ours` verifies them."""
    try:
        data = json.loads(layout.state_file.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}

    def ok(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    out: dict[str, int] = {}
    parts = data.get("parts")
    if isinstance(parts, dict):
        for name, p in parts.items():
            if isinstance(p, dict) and ok(p.get("pid")):
                out[str(name)] = p["pid"]
    if ok(data.get("supervisorPID")):
        out["supervisor"] = data["supervisorPID"]
    return out


def write_atomic(path: Path, text: str, mode: int = FILE_MODE) -> None:
    """Write via a temp file in the same dir and rename: readers see the old or the new file."""
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # the umask must not widen or narrow it
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
