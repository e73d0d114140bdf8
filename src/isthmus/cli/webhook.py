"""`isthmus webhook`: the admission webhook server for real clusters (the embedded apiserver runs the
same checks in-process). Serves load balancing's dklb-config checks; later capabilities add theirs.

Certificates, without cert-manager (as kube-webhook-certgen does): the serving certificate and its CA
live in a Secret; the first replica to start mints them (a create race is settled by the API: the
loser reads the winner's), and every replica patches the CA into the webhook configurations named
by --webhook-configuration. With --tls-cert-file/--tls-key-file the given files are used instead.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from isthmus.api.lb import LB_NAMESPACE, WEBHOOK_NAME
from isthmus.cli.app import (
    COMPONENTS,
    Background,
    ComponentKubeconfigOpt,
    ContextOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    command,
    fail,
    run_component,
)
from isthmus.cli.lb import LbClassLessOpt

log = logging.getLogger(__name__)

def _own_namespace() -> str:
    """The pod's namespace (the manifests pass POD_NAMESPACE), so an install in another namespace
    finds its Secret and names its Service right."""
    return os.environ.get("POD_NAMESPACE") or LB_NAMESPACE


def _ns_name(value: str, flag: str) -> tuple[str, str]:
    ns, sep, name = value.partition("/")
    if not sep or not ns or not name:
        raise fail(f"{flag} must be NAMESPACE/NAME, not {value!r}")
    return ns, name


def _hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise fail(f"--listen must be HOST:PORT, not {value!r}")
    return host or "0.0.0.0", int(port)


async def ensure_secret(client: Any, namespace: str, name: str, hosts: list[str]) -> tuple[bytes, bytes, bytes]:
    """(ca, cert, key) from the Secret, minted and stored when absent or incomplete."""
    from lightkube.core.exceptions import ApiError
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Secret

    from isthmus.runtime.webhook import self_signed

    keys = ("ca.crt", "tls.crt", "tls.key")
    for _ in range(3):
        try:
            secret = await client.get(Secret, name, namespace=namespace)
            data = secret.data or {}
            if all(k in data for k in keys):
                ca, cert, key = (base64.b64decode(data[k]) for k in keys)
                return ca, cert, key
        except ApiError as e:
            if e.status.code != 404:
                raise
            secret = None
        certs = self_signed(hosts)
        body = {"ca.crt": certs.ca, "tls.crt": certs.cert, "tls.key": certs.key}
        encoded = {k: base64.b64encode(v).decode() for k, v in body.items()}
        try:
            if secret is None:
                await client.create(Secret(metadata=ObjectMeta(name=name, namespace=namespace), type="kubernetes.io/tls",
                                           data=encoded))  # fmt: skip
            else:
                secret.data = encoded
                await client.replace(secret)
            log.info("minted the webhook's serving certificate", extra={"secret": f"{namespace}/{name}"})
            return certs.ca, certs.cert, certs.key
        except ApiError as e:
            if e.status.code != 409:  # another replica stored its own first: use that one
                raise
    raise RuntimeError(f"could not settle Secret {namespace}/{name}")


async def patch_ca_bundle(client: Any, configuration: str, ca: bytes) -> list[str]:
    """Set every webhook's clientConfig.caBundle in the Validating and Mutating configurations named
    `configuration`; returns the kinds patched (a missing one is skipped)."""
    from lightkube.core.exceptions import ApiError
    from lightkube.resources.admissionregistration_v1 import (
        MutatingWebhookConfiguration,
        ValidatingWebhookConfiguration,
    )

    bundle = base64.b64encode(ca).decode()
    done = []
    for kind in (ValidatingWebhookConfiguration, MutatingWebhookConfiguration):
        for _ in range(5):
            try:
                obj = await client.get(kind, configuration)
            except ApiError as e:
                if e.status.code == 404:
                    break
                raise
            if all(w.clientConfig.caBundle == bundle for w in obj.webhooks or []):
                done.append(kind.__name__)
                break
            for w in obj.webhooks or []:
                w.clientConfig.caBundle = bundle
            try:
                await client.replace(obj)
                done.append(kind.__name__)
                break
            except ApiError as e:
                if e.status.code != 409:
                    raise
    return done


@command("webhook", panel=COMPONENTS)
def webhook(
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    listen: Annotated[str, typer.Option("--listen", metavar="HOST:PORT", help="Where to serve HTTPS.")] = "0.0.0.0:8443",
    tls_secret: Annotated[str | None, typer.Option(
        "--tls-secret", metavar="NS/NAME", show_default=False,
        help=f"Secret holding (or to hold) the serving certificate and its CA (default: "
             f"$POD_NAMESPACE/{WEBHOOK_NAME}-webhook-tls, else {LB_NAMESPACE}).")] = None,
    service: Annotated[str | None, typer.Option(
        "--service", metavar="NS/NAME", show_default=False,
        help=f"The Service in front of this server: its DNS names go in the certificate (default: "
             f"$POD_NAMESPACE/{WEBHOOK_NAME}).")] = None,
    webhook_configuration: Annotated[str, typer.Option(
        "--webhook-configuration", help="Validating- and MutatingWebhookConfiguration to give the CA to.")]
    = WEBHOOK_NAME,
    tls_cert_file: Annotated[Path | None, typer.Option("--tls-cert-file", help="Serve this certificate instead "
                                                       "(e.g. cert-manager's); the CA is then not patched.")] = None,
    tls_key_file: Annotated[Path | None, typer.Option("--tls-key-file", help="Key of --tls-cert-file.")] = None,
    lb_class_less: LbClassLessOpt = False,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Serve admission webhooks (AdmissionReview v1 over TLS) for Isthmus's objects on a real cluster."""
    from isthmus.exposure.admission import HANDLERS as MCSVC_HANDLERS
    from isthmus.kube.client import make_client
    from isthmus.lb.admission import handlers as lb_handlers

    handlers: dict[str, Any] = {**lb_handlers(lb_class_less), **MCSVC_HANDLERS}
    from isthmus.runtime.webhook import WebhookServer, server_context

    host, port = _hostport(listen)
    secret_ns, secret_name = _ns_name(tls_secret or f"{_own_namespace()}/{WEBHOOK_NAME}-webhook-tls", "--tls-secret")
    svc_ns, svc_name = _ns_name(service or f"{_own_namespace()}/{WEBHOOK_NAME}", "--service")
    if (tls_cert_file is None) != (tls_key_file is None):
        raise fail("--tls-cert-file and --tls-key-file go together")
    hosts = [f"{svc_name}.{svc_ns}.svc", f"{svc_name}.{svc_ns}.svc.cluster.local", f"{svc_name}.{svc_ns}"]

    async def build() -> Background:
        from isthmus.egress.admission import webhook_handlers

        lookups = make_client(kubeconfig, context)  # the egress checks read classes and ask SubjectAccessReviews
        server = WebhookServer({**handlers, **webhook_handlers(lookups)})
        if tls_cert_file is not None and tls_key_file is not None:
            ctx = server_context(str(tls_cert_file), str(tls_key_file))
        else:
            client = make_client(kubeconfig, context)
            try:
                ca, cert, key = await ensure_secret(client, secret_ns, secret_name, hosts)
                patched = await patch_ca_bundle(client, webhook_configuration, ca)
                log.info("CA bundle in place", extra={"configurations": patched})
            finally:
                await client.close()
            with tempfile.TemporaryDirectory(prefix="isthmus-webhook-") as tmp:
                (Path(tmp) / "tls.crt").write_bytes(cert)
                (Path(tmp) / "tls.key").write_bytes(key)
                ctx = server_context(f"{tmp}/tls.crt", f"{tmp}/tls.key")
        try:
            await server.start(host, port, ctx)
        except OSError as e:
            raise fail(f"cannot listen on {listen}: {e.strerror or e}") from None
        log.info("admission webhooks serving", extra={"listen": f"{host}:{server.port}", "paths": list(handlers)})

        async def forever() -> None:
            await asyncio.Event().wait()

        async def stop() -> None:
            with contextlib.suppress(Exception):
                await server.stop()
            with contextlib.suppress(Exception):
                await lookups.close()

        return Background("webhook", forever, lambda: True, on_stop=stop)

    run_component("webhook", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)
