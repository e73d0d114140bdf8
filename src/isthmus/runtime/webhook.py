"""An admission webhook server (admission.k8s.io/v1 AdmissionReview over TLS), generic: capabilities
register handlers by path; `isthmus webhook` serves them on real clusters.

A handler gets the review's `request` and returns an `AdmissionResponse`; the server echoes the
request's uid, encodes JSONPatch operations (base64, `patchType: JSONPatch`) and answers 400 to a
body that is not an AdmissionReview v1 with a request uid, as kube's own webhooks do. Certificates:
`self_signed` mints a CA and a serving certificate for a Service's DNS names, for clusters without
cert-manager (the CLI stores them in a Secret and patches the CA into the webhook configurations).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import Counter

from isthmus.runtime.metrics import REGISTRY

log = logging.getLogger(__name__)

REVIEW_VERSION = "admission.k8s.io/v1"
REVIEWS = Counter("isthmus_webhook_reviews_total", "AdmissionReviews answered", ["path", "allowed"], registry=REGISTRY)


@dataclass
class AdmissionResponse:
    allowed: bool = True
    message: str = ""
    code: int = 0
    """HTTP-like code of a denial (kube shows it; default 403 when denied)."""
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_review(self, uid: str) -> dict[str, Any]:
        resp: dict[str, Any] = {"uid": uid, "allowed": self.allowed}
        if not self.allowed:
            resp["status"] = {"code": self.code or 403, "message": self.message,
                              "reason": "Invalid" if self.code == 422 else "Forbidden"}  # fmt: skip
        if self.patch:
            resp["patchType"] = "JSONPatch"
            resp["patch"] = base64.b64encode(json.dumps(self.patch).encode()).decode()
        if self.warnings:
            resp["warnings"] = self.warnings
        return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": resp}


Handler = Callable[[dict[str, Any]], Awaitable[AdmissionResponse]]


class WebhookServer:
    """Serves every registered handler at its path, plus /healthz and /readyz."""

    def __init__(self, handlers: dict[str, Handler], *, max_body: int = 3 * 1024 * 1024) -> None:
        self.handlers = handlers
        self.app = web.Application(client_max_size=max_body)
        for path in handlers:
            self.app.router.add_post(path, self._review)
        self.app.router.add_get("/healthz", self._ok)
        self.app.router.add_get("/readyz", self._ok)
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def _ok(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _review(self, request: web.Request) -> web.Response:
        try:
            review = json.loads(await request.read())
        except ValueError:
            return web.Response(status=400, text="the body is not JSON")
        req = review.get("request") if isinstance(review, dict) else None
        if (
            not isinstance(review, dict) or review.get("apiVersion") != REVIEW_VERSION
            or review.get("kind") != "AdmissionReview" or not isinstance(req, dict) or not req.get("uid")
        ):
            return web.Response(status=400, text=f"expected an {REVIEW_VERSION} AdmissionReview with a request uid")
        try:
            response = await self.handlers[request.path](req)
        except Exception as e:  # a bug must not let a bad object through silently: deny, say why
            log.exception("admission handler failed", extra={"path": request.path})
            response = AdmissionResponse(allowed=False, code=500, message=f"webhook error: {e}")
        REVIEWS.labels(request.path, str(response.allowed).lower()).inc()
        return web.json_response(response.to_review(req["uid"]))

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> None:
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port, ssl_context=ssl_context)
        await site.start()
        self.port = int(self.runner.addresses[0][1])

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@dataclass(frozen=True)
class Certificates:
    ca: bytes
    cert: bytes
    key: bytes


def self_signed(hosts: list[str], days: int = 3650) -> Certificates:
    """A new CA and a serving certificate for `hosts` (DNS names or IPs) signed by it, PEM."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "isthmus-webhook-ca")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    return Certificates(
        ca=ca.public_bytes(pem),
        cert=cert.public_bytes(pem),
        key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx
