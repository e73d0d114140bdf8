"""`isthmus version`: this client's version, and what runs in every cluster of the kubeconfig.

Like `kubectl version`, plus each cluster's Isthmus components: the Deployments and DaemonSets in
isthmus-system (and isthmus-pools, the pool manager's) and the version of the image they run. Every context of the kubeconfig is asked
(the broker and each member of a local clusterset), or the one --context names; they are asked
at once, each request bounded by the command timeout, and a cluster that does not answer shows
its error in its row. `--client` never contacts a server.
"""

from __future__ import annotations

import asyncio
import platform
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from isthmus.cli.app import TROUBLESHOOT, ContextOpt, KubeconfigOpt, command, user_error_message
from isthmus.cli.output import JSON, TABLE, YAML, Column, OutputOpt, print_document, print_table

SERVER_TIMEOUT = 10.0
"""Seconds for a whole cluster (its /version and two lists): an unreachable one costs no more."""


def client_version() -> dict[str, str]:
    from isthmus.api.image import IMAGE_TAG

    return {"version": IMAGE_TAG, "python": platform.python_version(),
            "platform": f"{sys.platform}/{platform.machine() or 'unknown'}"}


async def _cluster(kubeconfig: Path | None, context: str | None) -> dict[str, Any]:
    """What one context's cluster runs; `error` says what could not be read (its message, one line)."""
    import httpx2
    from lightkube.resources.apps_v1 import DaemonSet, Deployment

    from isthmus.api.image import NAMESPACE, image_version
    from isthmus.api.lb import POOLS_NAMESPACE
    from isthmus.kube.client import COMMAND_TIMEOUT, load_config, make_client, server_version

    row: dict[str, Any] = {"context": context, "server": None, "serverVersion": None, "components": [], "error": None}
    try:
        row["server"] = load_config(kubeconfig, context).cluster.server
        client = make_client(kubeconfig, context, timeout=COMMAND_TIMEOUT)
    except Exception as err:
        row["error"] = _message(err)
        return row
    try:
        async with asyncio.timeout(SERVER_TIMEOUT):
            try:
                row["serverVersion"] = (await server_version(client)).get("gitVersion")
            except httpx2.HTTPStatusError:
                pass  # an answer, only not this one: the lists below say what is wrong, if anything
            for kind, namespace in ((k, ns) for ns in (NAMESPACE, POOLS_NAMESPACE) for k in (Deployment, DaemonSet)):
                obj: Any
                async for obj in client.list(kind, namespace=namespace):
                    containers = obj.spec.template.spec.containers if obj.spec and obj.spec.template.spec else []
                    status = obj.status
                    if kind is Deployment:
                        ready = f"{(status.readyReplicas if status else 0) or 0}/{obj.spec.replicas or 0}"
                    else:
                        ready = f"{(status.numberReady if status else 0) or 0}/" \
                                f"{(status.desiredNumberScheduled if status else 0) or 0}"
                    images = [c.image or "" for c in containers]
                    name = obj.metadata.name or ""
                    row["components"].append({
                        "name": name.removeprefix("isthmus-"), "kind": kind.__name__, "namespace": namespace,
                        "workload": name, "images": images,
                        "version": ", ".join(dict.fromkeys(image_version(i) for i in images)) or "-",
                        "ready": ready,
                    })
    except Exception as err:
        row["error"] = _message(err)
    finally:
        try:
            await client.close()
        except Exception:  # closing must never hide the answer
            pass
    row["components"].sort(key=lambda c: c["name"])
    return row


def _message(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return f"no answer within {SERVER_TIMEOUT:g}s"
    message = user_error_message(err)
    if message is None:  # a bug: let it be seen whole
        raise err
    return message


async def _clusters(kubeconfig: Path | None, context: str | None) -> list[dict[str, Any]]:
    from isthmus.kube.client import KubeConfigError, context_names

    if context is not None:
        names: list[str | None] = [context]
    else:
        try:
            found = sorted(context_names(kubeconfig))
        except KubeConfigError as err:
            return [{"context": None, "server": None, "serverVersion": None, "components": [], "error": str(err)}]
        names = list(found) or [None]  # no kubeconfig file: the in-cluster account, if any
    return list(await asyncio.gather(*(_cluster(kubeconfig, name) for name in names)))


@command("version", panel=TROUBLESHOOT)
def version(
    client: Annotated[bool, typer.Option("--client", help="Only this client's version: contact no server.")] = False,
    output: OutputOpt = TABLE,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Print the client's version and every cluster's API server and component versions.

    For every context of the kubeconfig (or --context): the API server's version and each Isthmus
    component's. Exits 1 when a cluster could not be read."""
    doc: dict[str, Any] = {"kind": "Version", "client": client_version()}
    if not client:
        doc["clusters"] = asyncio.run(_clusters(kubeconfig, context))
    if output in (JSON, YAML):
        print_document(doc, output)
    else:
        c = doc["client"]
        typer.echo(f"Client Version: {c['version']} (Python {c['python']}, {c['platform']})")
        if not client:
            _print_clusters(doc["clusters"], output)
    if any(row["error"] for row in doc.get("clusters", [])):
        raise typer.Exit(1)


def _print_clusters(clusters: list[dict[str, Any]], output: str) -> None:
    columns: list[Column | str] = ["CLUSTER", "COMPONENT", "VERSION", "READY", Column("KIND", wide=True),
                                   Column("IMAGE", wide=True), Column("SERVER", wide=True)]
    errors = any(row["error"] for row in clusters)
    if errors:
        columns.append("ERROR")
    rows: list[list[str]] = []
    for row in clusters:
        name = row["context"] or "(in-cluster)"
        extra = [row["error"] or "-"] if errors else []
        rows.append([name, "kubernetes", row["serverVersion"] or "-", "-", "apiserver", "-", row["server"] or "-",
                     *extra])
        for comp in row["components"]:
            rows.append([name, comp["name"], comp["version"], comp["ready"], comp["kind"],
                         ",".join(comp["images"]) or "-", "", *([""] if errors else [])])
    print_table(columns, rows, output)
