"""`isthmus apiserver`: the embedded Kubernetes-compatible API server."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Annotated

import typer

from isthmus.cli.app import app, fail


def _read_or_create_token(path: Path) -> str:
    """k3s-style: use the token in the file, or create one (0600) when the file does not exist."""
    if path.exists():
        token = path.read_text().strip().splitlines()[0].strip() if path.read_text().strip() else ""
        if not token:
            raise fail(f"token file {path} is empty")
        return token
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token


@app.command("apiserver")
def apiserver(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0 = pick a free one).")] = 6443,
    data_dir: Annotated[Path | None, typer.Option(help="Persist state in SQLite here (default: in memory).")] = None,
    token_file: Annotated[Path | None, typer.Option(help="Require this bearer token (created if missing).")] = None,
    tls: Annotated[bool, typer.Option("--tls", help="Serve HTTPS with a self-signed CA.")] = False,
    kubeconfig_out: Annotated[Path | None, typer.Option(help="Write a kubeconfig here (default DATA_DIR/kubeconfig).")] = None,
    max_body_bytes: Annotated[int, typer.Option(help="Reject request bodies larger than this (413).")] = 3 * 1024 * 1024,
    log_format: Annotated[str, typer.Option(help="Log format: text or json.")] = "text",
    log_level: Annotated[str, typer.Option(help="Log level.")] = "info",
) -> None:
    """Serve a Kubernetes-compatible API (kubectl works against it) until SIGTERM/SIGINT."""
    from isthmus.apiserver.server import ApiServer, serve
    from isthmus.runtime.logging import setup_logging

    if log_format not in ("text", "json"):
        raise fail("--log-format must be text or json")
    setup_logging(log_format, log_level)
    if not 0 <= port <= 65535:
        raise fail("--port must be between 0 and 65535")
    if tls and data_dir is None:
        typer.echo("note: --tls without --data-dir: a new CA is made on every start", err=True)
    token = _read_or_create_token(token_file) if token_file else None
    if kubeconfig_out is None and data_dir is not None:
        kubeconfig_out = data_dir / "kubeconfig"
    server = ApiServer(data_dir=data_dir, token=token, tls=tls, host=host, port=port, max_body_bytes=max_body_bytes)
    try:
        asyncio.run(serve(server, str(kubeconfig_out.resolve()) if kubeconfig_out else None))
    except OSError as e:
        raise fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
