"""lightkube AsyncClient construction, the same for real clusters and the embedded apiserver.

Kubeconfigs are read as kubectl reads them: `--kubeconfig` alone, else every file of `$KUBECONFIG`
merged (missing ones skipped), else `~/.kube/config`, else the in-cluster service account.
"""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import yaml
from lightkube import AsyncClient, ConfigError, KubeConfig
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import Cluster, Context, User

from isthmus.kube import transport

COMMAND_TIMEOUT = httpx2.Timeout(5.0)
"""Per-request timeout of one-shot commands: a server that accepts and never answers fails them in
seconds, not after httpx's 30 s default (watches are not bounded by it)."""

DEFAULT_KUBECONFIG = "~/.kube/config"
SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICEACCOUNT_DIR_ENV = "ISTHMUS_SERVICEACCOUNT_DIR"
"""Where kube-lite's process pods find their ServiceAccount files (containers.py sets it)."""

# kubectl resolves these file references against the directory of the file that holds them.
_CLUSTER_FILES = ("certificate-authority",)
_USER_FILES = ("client-certificate", "client-key", "tokenFile")
_SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))


class KubeConfigError(Exception):
    """The kubeconfig cannot be loaded (missing or malformed file, unknown context, no in-cluster
    account). The message is one line meant for users: CLIs print it and exit 2."""


def load_config(kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None) -> SingleConfig:
    """Select the configuration to talk to one API server, as kubectl does.

    An explicit kubeconfig path is the only file read. Otherwise the files of `$KUBECONFIG`
    (os.pathsep-separated; missing ones skipped) are merged: the first file that sets the
    current-context, or a cluster, user or context of a given name, wins. Without `$KUBECONFIG`,
    `~/.kube/config`; with no file at all, the in-cluster service account. `context` picks a
    context (default: the current-context).
    """
    if kubeconfig is not None:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise KubeConfigError(f"kubeconfig {path} not found")
        return _select(_merge([(path, _read(path))]), context, str(path))
    env = os.environ.get("KUBECONFIG", "")
    paths = list(dict.fromkeys(Path(p).expanduser() for p in env.split(os.pathsep) if p))
    if not paths:
        paths = [Path(DEFAULT_KUBECONFIG).expanduser()]
    existing = [p for p in paths if p.is_file()]
    if not existing:
        if context is None:
            in_cluster = _service_account()
            if in_cluster is not None:
                return in_cluster
        if env:
            raise KubeConfigError(f"none of the KUBECONFIG files exist ({', '.join(map(str, paths))})")
        raise KubeConfigError(
            f"no kubeconfig: {paths[0]} not found and not running in a cluster (pass --kubeconfig or set KUBECONFIG)"
        )
    where = ", ".join(map(str, existing))
    return _select(_merge([(p, _read(p)) for p in existing]), context, where)


def context_names(kubeconfig: str | os.PathLike[str] | None = None) -> list[str]:
    """Every context of the kubeconfig `load_config` would read (the merged `$KUBECONFIG` files),
    current one first; empty in a pod (the in-cluster account has none)."""
    if kubeconfig is not None:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise KubeConfigError(f"kubeconfig {path} not found")
        merged = _merge([(path, _read(path))])
    else:
        env = os.environ.get("KUBECONFIG", "")
        paths = list(dict.fromkeys(Path(p).expanduser() for p in env.split(os.pathsep) if p))
        existing = [p for p in paths or [Path(DEFAULT_KUBECONFIG).expanduser()] if p.is_file()]
        merged = _merge([(p, _read(p)) for p in existing])
    names = sorted(merged.entries["contexts"])
    current = merged.current_context
    return [current, *(n for n in names if n != current)] if current in names else names


async def server_version(client: AsyncClient) -> dict[str, Any]:
    """The API server's `/version` document (gitVersion, platform, ...), through the client's own
    connection, credentials and timeout (lightkube has no call for it)."""
    response = await client._client._client.get("/version")
    response.raise_for_status()
    doc: dict[str, Any] = response.json()
    return doc


def _service_account() -> SingleConfig | None:
    """client-go's InClusterConfig: ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``, the
    token and CA of the ServiceAccount dir — ``$ISTHMUS_SERVICEACCOUNT_DIR`` when set (kube-lite's
    process pods have no mount namespace), else the usual path. The token is read from its file on
    use, not once (see :class:`TokenFileAuth`), so the kubelet's rotations are picked up."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        return None
    account = Path(os.environ.get(SERVICEACCOUNT_DIR_ENV) or SERVICEACCOUNT_DIR)
    token_file = account / "token"
    if not token_file.is_file():
        return None
    try:
        namespace = (account / "namespace").read_text().strip() or "default"
    except OSError:
        namespace = "default"
    if ":" in host:
        host = f"[{host}]"
    ca = account / "ca.crt"
    try:
        return KubeConfig.from_one(
            cluster=Cluster(server=f"https://{host}:{port}", certificate_auth=str(ca) if ca.is_file() else None),
            user=User(token_file=str(token_file)),
            namespace=namespace,
        ).get()
    except ConfigError:
        return None


class TokenFileAuth(httpx2.Auth):
    """Bearer token from a file, read again whenever the file changes (client-go's cached file
    token source re-reads it; lightkube's reads it once and again only after a 401), and once more
    after a 401 in case it changed within the same second. The file is looked at once a second at
    most: a stat per request cost a busy controller a system call each (kubelet rotates the token
    long before it expires)."""

    CHECK_SECONDS = 1.0

    def __init__(self, token_file: str) -> None:
        self.token_file = token_file
        self._stamp: tuple[int, int] | None = None
        self._header = ""
        self._checked = -self.CHECK_SECONDS

    def _read(self, force: bool = False) -> str:
        now = time.monotonic()
        if not force and self._header and now - self._checked < self.CHECK_SECONDS:
            return self._header
        self._checked = now
        try:
            st = os.stat(self.token_file)
            stamp = (st.st_mtime_ns, st.st_ino)
            if force or stamp != self._stamp:
                self._header = f"Bearer {Path(self.token_file).read_text().strip()}"
                self._stamp = stamp
        except OSError:
            if not self._header:
                raise ConfigError(f"token file {self.token_file} cannot be read") from None
        return self._header

    def bearer_header(self, force: bool = False) -> str:
        """The Authorization header to send now (force: read the file again, after a 401)."""
        return self._read(force)

    def auth_flow(self, request: httpx2.Request) -> Any:
        request.headers["Authorization"] = self._read()
        response = yield request
        if response.status_code == 401:
            header = self._header
            if self._read(force=True) != header:
                request.headers["Authorization"] = self._header
                yield request


def _read(path: Path) -> dict[str, Any]:
    """One kubeconfig file as a mapping, its relative file references made absolute."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise KubeConfigError(f"cannot read kubeconfig {path}: {reason}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise KubeConfigError(f"kubeconfig {path} is not valid YAML: {_yaml_problem(err)}") from None
    if doc is None:  # an empty file is an empty config, as for kubectl
        return {}
    if not isinstance(doc, dict):
        raise KubeConfigError(
            f"kubeconfig {path} is not a kubeconfig: expected a mapping with clusters, users and contexts, "
            f"found {type(doc).__name__}"
        )
    base = path.absolute().parent
    for section, key in _SECTIONS:
        entries = doc.get(section)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise KubeConfigError(f"kubeconfig {path}: {section} must be a list, not {type(entries).__name__}")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
                raise KubeConfigError(f"kubeconfig {path}: {section}[{i}] has no name")
            if not isinstance(entry.get(key), dict):
                raise KubeConfigError(f"kubeconfig {path}: {section}[{i}] ({entry['name']}) has no {key} mapping")
            _resolve_files(entry[key], key, base)
    current = doc.get("current-context")
    if current is not None and not isinstance(current, str):
        raise KubeConfigError(f"kubeconfig {path}: current-context must be a string")
    return doc


def _yaml_problem(err: yaml.YAMLError) -> str:
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        return f"{err.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(err).split())


def _resolve_files(body: dict[str, Any], key: str, base: Path) -> None:
    fields = _CLUSTER_FILES if key == "cluster" else _USER_FILES if key == "user" else ()
    for field in fields:
        value = body.get(field)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            body[field] = str(base / value)
    exec_ = body.get("exec") if key == "user" else None
    if isinstance(exec_, dict):
        command = exec_.get("command")
        # A bare command name is looked up on PATH; a relative path is relative to the file (kubectl).
        if isinstance(command, str) and os.sep in command and not Path(command).is_absolute():
            exec_["command"] = str(base / command)


class _Merged:
    """Several kubeconfig files as one: each name and the current-context from the first file that sets it."""

    def __init__(self) -> None:
        self.current_context: str | None = None
        self.entries: dict[str, dict[str, tuple[Path, dict[str, Any]]]] = {s: {} for s, _ in _SECTIONS}


def _merge(docs: list[tuple[Path, dict[str, Any]]]) -> _Merged:
    merged = _Merged()
    for path, doc in docs:
        if merged.current_context is None and doc.get("current-context"):
            merged.current_context = doc["current-context"]
        for section, key in _SECTIONS:
            for entry in doc.get(section) or []:
                merged.entries[section].setdefault(entry["name"], (path, entry[key]))
    return merged


def _select(merged: _Merged, context: str | None, where: str) -> SingleConfig:
    contexts = merged.entries["contexts"]
    if not contexts:
        raise KubeConfigError(f"kubeconfig {where} defines no contexts")
    known = ", ".join(sorted(contexts))
    name = context or merged.current_context
    if name is None:
        raise KubeConfigError(f"kubeconfig {where} has no current-context: pass --context (contexts: {known})")
    if name not in contexts:
        raise KubeConfigError(f"context {name!r} not found in kubeconfig {where} (contexts: {known})")
    path, raw_ctx = contexts[name]
    ctx = _convert(raw_ctx, Context, f"context {name!r}", path)
    if not merged.entries["clusters"]:
        raise KubeConfigError(f"kubeconfig {where} defines no clusters")
    if ctx.cluster not in merged.entries["clusters"]:
        raise KubeConfigError(f"context {name!r} names cluster {ctx.cluster!r}, which kubeconfig {where} does not define")
    cluster_path, raw_cluster = merged.entries["clusters"][ctx.cluster]
    cluster = _convert(raw_cluster, Cluster, f"cluster {ctx.cluster!r}", cluster_path)
    user = User()  # a context without a user sends no credentials (kubectl); lightkube needs an object
    if ctx.user:
        if ctx.user not in merged.entries["users"]:
            raise KubeConfigError(f"context {name!r} names user {ctx.user!r}, which kubeconfig {where} does not define")
        user_path, raw_user = merged.entries["users"][ctx.user]
        user = _convert(raw_user, User, f"user {ctx.user!r}", user_path)
    return SingleConfig(context_name=name, context=ctx, cluster=cluster, user=user, fname=path)


def _convert(raw: Mapping[str, Any], model: type[Any], what: str, path: Path) -> Any:
    try:
        return msgspec.convert(raw, model)
    except msgspec.ValidationError as err:
        raise KubeConfigError(f"kubeconfig {path}: {what}: {err}") from None


def make_client(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    *,
    namespace: str | None = None,
    field_manager: str | None = None,
    timeout: float | httpx2.Timeout = 30.0,
) -> AsyncClient:
    """A lightkube AsyncClient for one API server (see `load_config` for how it is chosen).

    `field_manager` becomes the default for every write (server-side apply needs one);
    `timeout` bounds each request except watches, which lightkube keeps open.
    """
    return client_for(load_config(kubeconfig, context), namespace=namespace, field_manager=field_manager,
                      timeout=timeout)


def client_for(
    config: SingleConfig,
    *,
    namespace: str | None = None,
    field_manager: str | None = None,
    timeout: float | httpx2.Timeout = 30.0,
    auth: httpx2.Auth | None = None,
) -> AsyncClient:
    """The one way Isthmus builds a client from a selected configuration (kubeconfig, broker-info).

    `auth` replaces the configuration's credentials (kube/tokens.py's ServiceAccountToken): the
    server and CA stay, and no client certificate is presented."""
    if auth is not None:
        config = config._replace(user=User())
    client = AsyncClient(
        config,
        namespace=namespace,
        field_manager=field_manager,
        timeout=timeout if isinstance(timeout, httpx2.Timeout) else httpx2.Timeout(timeout),
        # Proxy variables must not route loopback apiservers (the embedded default) through a proxy.
        trust_env=not is_loopback_host(httpx2.URL(config.cluster.server).host),
    )
    if auth is not None:
        client._client._client.auth = auth
    elif config.user is not None and config.user.token_file:
        # lightkube offers no hook for its httpx client's auth; its own token-file auth reads once.
        client._client._client.auth = TokenFileAuth(config.user.token_file)
    if os.environ.get("ISTHMUS_KUBE_TRANSPORT", "aiohttp") != "httpx":
        transport.install(client)  # a third less client CPU per request (kube/transport.py)
    return client


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1 and "localhost": this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
