"""`isthmus apiserver`: the embedded Kubernetes-compatible API server."""

from __future__ import annotations

import enum
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from isthmus.cli.app import COMPONENTS, LogFormatOpt, LogLevelOpt, command, fail
from isthmus.kube.client import is_loopback_host
from isthmus.runtime.loop import run

LbClassLessOpt = Annotated[bool, typer.Option(
    "--lb-class-less-services",
    help="The DklbConfig plugin also checks and defaults class-less Services of type LoadBalancer (as "
         "`isthmus webhook --lb-class-less-services`); without it only those of loadBalancerClass "
         "isthmus.io/edgelb. For a cluster with no other load balancer (the local clusterset).")]


class KubeconfigAuth(enum.StrEnum):
    token = "token"
    cert = "cert"


def _read_or_create_token(path: Path) -> str:
    """k3s-style: use the token in the file, or create one (0600) when the file does not exist."""
    from isthmus.apiserver.storage.datadir import make_private_file, write_private

    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            token = secrets.token_urlsafe(32)
            write_private(path, token + "\n")
            return token
        make_private_file(path)
        lines = path.read_text().strip().splitlines()
    except OSError as e:
        raise fail(f"cannot use token file {path}: {e.strerror or e}") from None
    token = lines[0].strip() if lines else ""
    if not token or " " in token:
        raise fail(f"token file {path} must hold one token on its first line")
    return token


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration_seconds(text: str) -> float:
    """A Go duration (time.ParseDuration: "1h", "1h30m", "90s", "0") in seconds; ValueError as Go
    words it when the text is not one, or is negative."""
    t = text.strip()
    if t == "0":
        return 0.0
    if t.startswith("-"):
        raise ValueError("must not be negative")
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(t):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if t and pos == 0 and re.fullmatch(r"[\d.]+", t):
        raise ValueError(f'time: missing unit in duration "{text}"')
    if not t or pos != len(t):
        raise ValueError(f'time: invalid duration "{text}"')
    return total


@command("apiserver", panel=COMPONENTS)
def apiserver(
    host: Annotated[str, typer.Option(
        help="Address to listen on. Other than loopback (127.0.0.0/8, ::1, localhost) needs TLS.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0 = pick a free one).")] = 6443,
    data_dir: Annotated[Path | None, typer.Option(
        help="Persist state in SQLite here, 0700 (default: in memory).")] = None,
    token_file: Annotated[Path | None, typer.Option(
        help="Bearer token clients must send (created if missing; default DATA_DIR/token, "
             "or a new token per start without a data dir).")] = None,
    tls: Annotated[bool, typer.Option(
        "--tls/--no-tls", help="Serve HTTPS with a self-signed CA (kubectl sends tokens only over HTTPS).")] = True,
    kubeconfig_out: Annotated[Path | None, typer.Option(
        help="Write a kubeconfig here (default DATA_DIR/kubeconfig, or a private temp dir).")] = None,
    kubeconfig_auth: Annotated[KubeconfigAuth, typer.Option(
        help="How the written kubeconfig authenticates: the bearer token, or a client certificate "
             "for the same user (needs TLS).")] = KubeconfigAuth.token,
    reinitialize: Annotated[bool, typer.Option(
        "--reinitialize", help="Start with an empty database when the data dir's one is missing, empty or "
                               "unreadable (an unreadable file is renamed aside, never deleted).")] = False,
    max_body_bytes: Annotated[int, typer.Option(help="Reject request bodies larger than this (413).")] = 3 * 1024 * 1024,
    anonymous_auth: Annotated[bool, typer.Option(
        "--anonymous-auth/--no-anonymous-auth",
        help="Serve requests without credentials as system:anonymous (kube's flag; only /healthz, /livez, "
             "/readyz and /version are open to them). Off: every such request is 401.")] = False,
    service_account_issuer: Annotated[str, typer.Option(
        help="The iss of ServiceAccount tokens this server issues (and the default API audience).")]
        = "https://kubernetes.default.svc.cluster.local",
    service_account_signing_key_file: Annotated[Path | None, typer.Option(
        help="PEM RSA private key that signs ServiceAccount tokens (created if missing; default "
             "DATA_DIR/tls/sa.key, or a new key per start without a data dir).")] = None,
    service_account_key_file: Annotated[list[Path] | None, typer.Option(
        help="PEM RSA public (or private) keys that also verify ServiceAccount tokens (repeatable), "
             "e.g. a previous signing key.")] = None,
    authorization_mode: Annotated[str, typer.Option(
        help="kube's --authorization-mode: comma-separated RBAC, AlwaysAllow, AlwaysDeny "
             "(system:masters is always allowed).")] = "RBAC",
    cluster_netns: Annotated[Path | None, typer.Option(
        "--cluster-netns", help="Make connections to the cluster's addresses (webhooks through their Service) from "
        "this network namespace (a path such as /run/netns/NAME), as kube's egress selector does for the "
        "cluster network.")] = None,
    event_ttl: Annotated[str, typer.Option(
        metavar="DURATION",
        help="kube's flag: how long an Event is kept after its last write (Go duration: 1h, 30m, 90s; "
             "0 keeps Events forever).")] = "1h",
    disable_admission_plugins: Annotated[str, typer.Option(
        "--disable-admission-plugins", metavar="NAMES",
        help="kube's flag: comma-separated in-process admission plugins to turn off (DklbConfig).")] = "",
    lb_class_less_services: LbClassLessOpt = False,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Serve a Kubernetes-compatible API (kubectl works against it) until SIGTERM/SIGINT.

    Every request needs credentials: the bearer token, a ServiceAccount token (`kubectl create
    token`), or (with TLS) a client certificate from the server's client CA. With --anonymous-auth,
    /healthz, /livez, /readyz and /version are open to anyone.
    """
    from isthmus.apiserver.server import ApiServer, serve
    from isthmus.apiserver.storage.datadir import DataDirError
    from isthmus.cli import admission_plugins
    from isthmus.runtime.logging import setup_logging

    disabled = [p.strip() for p in disable_admission_plugins.split(",") if p.strip()]
    unknown = [p for p in disabled if p not in admission_plugins.PLUGINS]
    if unknown:
        raise fail(f"--disable-admission-plugins: unknown plugin {unknown[0]!r} "
                   f"(plugins: {', '.join(admission_plugins.PLUGINS)})")
    try:
        event_ttl_seconds = go_duration_seconds(event_ttl)
    except ValueError as e:
        raise fail(f"--event-ttl {event_ttl}: {e}") from None
    modes = [m.strip() for m in authorization_mode.split(",")]
    if not all(m in ("RBAC", "AlwaysAllow", "AlwaysDeny") for m in modes):
        raise fail(f"--authorization-mode {authorization_mode}: each mode must be one of RBAC, AlwaysAllow, AlwaysDeny")
    # Everything this process writes (database, WAL, keys, kubeconfig, token) is private.
    os.umask(0o077)
    setup_logging(log_format, log_level)
    if kubeconfig_auth is KubeconfigAuth.cert and not tls:
        raise fail("--kubeconfig-auth cert needs TLS (drop --no-tls): client certificates are part of the TLS handshake")
    if not tls and not is_loopback_host(host):
        raise fail(f"--host {host} is not a loopback address: serving beyond this machine needs TLS "
                   "(drop --no-tls); only 127.0.0.0/8, ::1 and localhost may serve plain HTTP")
    if token_file is None and data_dir is not None:
        token_file = data_dir / "token"
    # Without a data dir the token is new on every start and known only through the kubeconfig,
    # which then goes to a private temp dir (0700) rather than to stdout or a log.
    token = _read_or_create_token(token_file) if token_file else secrets.token_urlsafe(32)
    scratch: str | None = None
    if kubeconfig_out is None:
        if data_dir is not None:
            kubeconfig_out = data_dir / "kubeconfig"
        else:
            scratch = tempfile.mkdtemp(prefix="isthmus-apiserver-")
            kubeconfig_out = Path(scratch) / "kubeconfig"
    if data_dir is None:
        typer.echo("note: no --data-dir: objects are in memory; token and CA are new on every start", err=True)
    if not tls:
        typer.echo("note: --no-tls: kubectl does not send tokens over plain HTTP, only other clients will "
                   "authenticate", err=True)
    server = ApiServer(data_dir=data_dir, token=token, tls=tls, host=host, port=port,
                       max_body_bytes=max_body_bytes, reinitialize=reinitialize, anonymous_auth=anonymous_auth,
                       service_account_issuer=service_account_issuer,
                       service_account_signing_key_file=service_account_signing_key_file,
                       service_account_key_files=tuple(service_account_key_file or ()),
                       authorization_mode=",".join(modes), admission=admission_plugins.build(disabled, lb_class_less_services),
                       event_ttl=event_ttl_seconds, cluster_netns=str(cluster_netns) if cluster_netns else None)
    try:
        run(serve(server, str(kubeconfig_out.resolve()), kubeconfig_auth.value))
    except DataDirError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)  # its token died with the server
