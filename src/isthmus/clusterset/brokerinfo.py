"""The broker-info document: everything a cluster needs to join a clusterset.

`isthmus deploy-broker` writes it (`broker-info.subm`, base64 of JSON as Submariner's file is, so
it survives copy and paste); `isthmus join` reads it and stores it in the cluster's Secret
`isthmus-system/isthmus-broker`, from which the agent reaches the broker.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.config.kubeconfig import SingleConfig

from isthmus.api.mcs import DEFAULT_BROKER_NAMESPACE, DEFAULT_CLUSTERSET_IP_CIDR_RANGE
from isthmus.kube.client import client_for

FORMAT_VERSION = 1
"""Bumped only for incompatible changes; decoders reject versions they do not know."""

BROKER_TIMEOUT = 5.0
"""Per-request timeout of a component's broker client (`BrokerInfo.client(timeout=BROKER_TIMEOUT)`):
an unreachable or silent broker shows in conditions within seconds, not after httpx's 30 s default
(watches are not bounded by it)."""


@dataclass(frozen=True)
class BrokerInfo:
    """Where the broker API is, how to authenticate to it, and the clusterset settings."""

    server: str
    """URL of the broker's API server."""
    ca_pem: str | None = None
    """PEM of the CA that signed the broker's serving certificate (None: system trust or plain HTTP)."""
    token: str | None = None
    """Bearer token for the broker API (None: no authentication)."""
    namespace: str = DEFAULT_BROKER_NAMESPACE
    """The broker namespace holding the clusterset's objects."""
    clusterset_ip_enabled: bool = False
    """The clusterset's default for exports without the use-clusterset-ip annotation."""
    clusterset_ip_cidr_range: list[str] = field(default_factory=lambda: [DEFAULT_CLUSTERSET_IP_CIDR_RANGE])
    """The clusterset's VIP range; every cluster's CIDR is a block of it."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (camelCase keys, stable)."""
        out: dict[str, Any] = {"version": FORMAT_VERSION, "server": self.server}
        if self.ca_pem is not None:
            out["caPEM"] = self.ca_pem
        if self.token is not None:
            out["token"] = self.token
        out["namespace"] = self.namespace
        out["clustersetIPEnabled"] = self.clusterset_ip_enabled
        out["clustersetIPCIDRRange"] = list(self.clusterset_ip_cidr_range)
        return out

    def encode(self) -> str:
        """base64 of compact JSON: one line, safe to paste anywhere."""
        raw = json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True).encode()
        return base64.b64encode(raw).decode("ascii")

    @classmethod
    def decode(cls, text: str | bytes) -> BrokerInfo:
        """Parse an encoded document; ValueError (saying what is wrong) for anything else."""
        if isinstance(text, bytes):
            try:
                text = text.decode("ascii")
            except UnicodeDecodeError:
                raise ValueError("broker-info is not base64 text") from None
        compact = "".join(text.split())
        if not compact:
            raise ValueError("broker-info is empty")
        try:
            raw = base64.b64decode(compact, validate=True)
            data = json.loads(raw)
        except (binascii.Error, ValueError):
            raise ValueError("broker-info is not a broker-info document (expected base64-encoded JSON)") from None
        if not isinstance(data, dict):
            raise ValueError("broker-info is not a broker-info document (expected a JSON object)")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BrokerInfo:
        """Validate the JSON form; every message names the offending key."""
        version = data.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise ValueError(f"broker-info version {version!r} is not supported (this isthmus reads {FORMAT_VERSION})")
        server = data.get("server")
        if not isinstance(server, str) or not server.startswith(("http://", "https://")):
            raise ValueError("broker-info: 'server' must be an http(s) URL")
        ca_pem = _optional_str(data, "caPEM")
        if ca_pem is not None and "-----BEGIN CERTIFICATE-----" not in ca_pem:
            raise ValueError("broker-info: 'caPEM' is not a PEM certificate")
        token = _optional_str(data, "token")
        namespace = data.get("namespace", DEFAULT_BROKER_NAMESPACE)
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("broker-info: 'namespace' must be a non-empty string")
        enabled = data.get("clustersetIPEnabled", False)
        if not isinstance(enabled, bool):
            raise ValueError("broker-info: 'clustersetIPEnabled' must be true or false")
        ranges = data.get("clustersetIPCIDRRange", [DEFAULT_CLUSTERSET_IP_CIDR_RANGE])
        if not isinstance(ranges, list) or not ranges or not all(isinstance(r, str) for r in ranges):
            raise ValueError("broker-info: 'clustersetIPCIDRRange' must be a non-empty list of CIDRs")
        for r in ranges:
            try:
                ipaddress.ip_network(r, strict=True)
            except ValueError as err:
                raise ValueError(f"broker-info: 'clustersetIPCIDRRange' has an invalid CIDR {r!r}: {err}") from None
        return cls(
            server=server,
            ca_pem=ca_pem,
            token=token,
            namespace=namespace,
            clusterset_ip_enabled=enabled,
            clusterset_ip_cidr_range=list(ranges),
        )

    def to_kubeconfig(self, name: str = "isthmus-broker") -> dict[str, Any]:
        """A kubeconfig (dict) for the broker API, default namespace = the broker namespace."""
        cluster: dict[str, Any] = {"server": self.server}
        if self.ca_pem:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_pem.encode()).decode("ascii")
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": self.namespace}}],
            "current-context": name,
        }

    def client(self, *, field_manager: str | None = None, timeout: float | httpx2.Timeout = 30.0) -> AsyncClient:
        """A lightkube AsyncClient for the broker API, built as every other Isthmus client."""
        config = KubeConfig.from_dict(self.to_kubeconfig()).get()
        if config is None:  # pragma: no cover - to_kubeconfig always names its one context
            raise ValueError("broker-info: no context")
        return client_for(config, namespace=self.namespace, field_manager=field_manager, timeout=timeout)


def _optional_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"broker-info: {key!r} must be a non-empty string")
    return value



def access_from_config(config: SingleConfig) -> tuple[str, str | None, str | None]:
    """(server URL, CA PEM, token) of a selected kubeconfig context: how clusters reach the broker.

    Files named in the kubeconfig (certificate-authority, tokenFile) are read relative to it, so
    the broker-info document is self-contained. Client-certificate or exec users give no token.
    """
    cluster = config.cluster
    ca_pem: str | None = None
    try:
        if cluster.certificate_auth_data:
            ca_pem = base64.b64decode(cluster.certificate_auth_data).decode()
        elif cluster.certificate_auth:
            ca_pem = Path(config.abs_file(cluster.certificate_auth)).read_text()
        token: str | None = None
        user = config.user
        if user is not None:
            if user.token:
                token = user.token
            elif user.token_file:
                token = Path(config.abs_file(user.token_file)).read_text().strip() or None
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read the broker's CA or token from the kubeconfig: {err}") from None
    return cluster.server, ca_pem, token


def reaches_broker(config: SingleConfig, info: BrokerInfo) -> bool:
    """Whether a kubeconfig context is the broker of `info`: at its URL, or — where members reach it
    at another address than the admin does (a private address; the local clusterset's runc mode,
    where members dial the fabric's 10.255.0.1 and this machine 127.0.0.1) — serving with the same
    CA. A client on this machine then uses the context instead of dialling the members' address."""
    if str(config.cluster.server).rstrip("/") == info.server.rstrip("/"):
        return True
    if not info.ca_pem:
        return False
    try:
        _, ca_pem, _ = access_from_config(config)
    except ValueError:
        return False
    return ca_pem is not None and "".join(ca_pem.split()) == "".join(info.ca_pem.split())


def as_seen_from(info: BrokerInfo, configs: Iterable[SingleConfig]) -> BrokerInfo:
    """`info` with the broker's address as one of these contexts reaches it (same CA, another URL),
    keeping its own credentials: a member's token is used from this machine without dialling the
    address only members can reach. Unchanged when no context is the broker."""
    for config in configs:
        if reaches_broker(config, info):
            return dataclasses.replace(info, server=str(config.cluster.server).rstrip("/"))
    return info
