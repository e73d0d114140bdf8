"""Load-balancing capability API: the `LoadBalancerPool` kind (isthmus.io), the
`kubernetes.dcos.io/dklb-config` configuration objects of Services and Ingresses, the seed's naming
rules, and every well-known annotation, label, reason and condition string of the capability.

The translator (`isthmus.lb`, dklb's role) writes pool specs; the pool manager (`isthmus.haproxy`,
EdgeLB's role) runs them and writes pool status. They meet only here: neither imports the other.

A pool spec mirrors the EdgeLB v2 pool (name, role, cpus, mem, count, haproxy.stats,
haproxy.frontends[], haproxy.backends[]); its status is EdgeLB's pool metadata (per-frontend
private and public addresses with real ports, the stats port), per instance.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal
from urllib.parse import quote

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from isthmus.api.base import (
    AGE_COLUMN,
    ATOMIC_LIST,
    Condition,
    Conditions,
    CRDInfo,
    Int32,
    KubeModel,
    PortNumber,
    PrinterColumn,
    Resource,
    Time,
    list_map,
    merge_conditions,
    new_condition,
)
from isthmus.api.mcs import AGENT_NAMESPACE, ISTHMUS_GROUP, ISTHMUS_VERSION

# --- annotations, labels, classes ---------------------------------------------------------------

DKLB_CONFIG_ANNOTATION = "kubernetes.dcos.io/dklb-config"
"""On a Service of type LoadBalancer or an Ingress: the YAML configuration object of the seed."""
CREATION_STRATEGY_ANNOTATION = "kubernetes.dcos.io/edgelb-pool-creation-strategy"
"""The seed's Scenario 6 annotation; the same setting as the config's `.strategies.creation`
(both may be given only when they agree)."""
INGRESS_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
EDGELB_INGRESS_CLASS = "edgelb"
"""`kubernetes.io/ingress.class: edgelb` selects the translator for an Ingress (the seed)."""
EDGELB_CONTROLLER = "isthmus.io/edgelb"
"""IngressClass `spec.controller` (and Service `spec.loadBalancerClass`) naming the translator."""
PAUSED_ANNOTATION = "isthmus.io/lb-paused"
"""On a Service/Ingress: "true" stops translation of that one object (its pool is left as it is)."""
POOL_CREATED_ANNOTATION = "isthmus.io/lb-pool-created"
"""On a Service/Ingress: the pool the translator has created for it (the `Once` strategy's memory)."""
POOL_CREATOR_ANNOTATION = "isthmus.io/lb-pool-creator"
"""On a LoadBalancerPool: `<Kind>/<ns>/<name>` of the owner whose config sets the pool-level settings
(role, network, cpus, mem, count); other owners sharing the pool are warned when theirs differ."""
POOL_SHARED_WITH_ANNOTATION = "isthmus.io/lb-pool-shared-with"
"""On a LoadBalancerPool: the namespaces (comma-separated, `*` for all) its creator's config lets
join it (`sharedWith`), written by the translator from that config. Automatic pools ignore it."""
POOL_ALLOWED_NAMESPACES_ANNOTATION = "isthmus.io/lb-pool-allowed-namespaces"
"""On a LoadBalancerPool, set by an admin (pools are cluster-scoped): namespaces (comma-separated, `*`
for all) that may join it besides those its creator shares it with. The translator never writes it.
On a pool made out of band (no creator), it alone decides; absent there, every namespace may."""
POOL_CLUSTER_LABEL = "isthmus.io/lb-cluster"
"""On a LoadBalancerPool a translator created: its cluster name (as sanitized for pool names)."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
TRANSLATOR_MANAGER = "isthmus-lb"
"""Field manager and managed-by value of the translator."""
POOL_MANAGER = "isthmus-pools"
"""Field manager of the pool manager (it writes LoadBalancerPool status only)."""

LB_NAMESPACE = AGENT_NAMESPACE
"""Where the translator's Lease (and the controller manager running it) lives."""
POOLS_NAMESPACE = "isthmus-pools"
"""The pool manager's own namespace (deploy/member/pools): it runs on the host network, which Pod
Security's baseline level forbids, so it lives apart, labelled `enforce: privileged`, and the rest
of Isthmus keeps a stricter level. Its slot Leases are there too (the pod's $POD_NAMESPACE)."""
TRANSLATOR_LEASE_NAME = "isthmus-lb"
WEBHOOK_NAME = "isthmus-lb"
"""Name of the Service, Validating- and MutatingWebhookConfiguration of `isthmus webhook`."""

PUBLIC_ROLE = "slave_public"
"""The seed's role for pools exposed outside the cluster; every other role is internal."""
INTERNAL_NETWORK = "dcos"
"""The network every internal pool is forced onto (the seed)."""

# --- conditions and event reasons ---------------------------------------------------------------

READY = "Ready"
"""LoadBalancerPool condition: at least one instance serves the current spec."""
STATUS_WRITTEN = "StatusWritten"
"""LoadBalancerPool condition, present only while False: the pool manager could not write the full
status (the apiserver refused it, e.g. too large); the message carries the apiserver's answer."""


class Reason(StrEnum):
    """Event reasons (and condition reasons) of the capability."""

    TRANSLATION_ERROR = "TranslationError"
    INVALID_CONFIG = "InvalidConfig"
    POOL_MISSING = "PoolMissing"
    POOL_CREATED = "PoolCreated"
    POOL_UPDATED = "PoolUpdated"
    POOL_DELETED = "PoolDeleted"
    POOL_NOT_CREATED = "PoolNotCreated"
    POOL_UNREACHABLE = "PoolManagerUnreachable"
    POOL_NOT_PROVISIONED = "PoolNotProvisioned"
    PORT_CONFLICT = "PortConflict"
    POOL_SETTINGS_CONFLICT = "PoolSettingsConflict"
    INVALID_BACKEND_SERVICE = "InvalidBackendService"
    UNSUPPORTED_PROTOCOL = "UnsupportedProtocol"
    ADDRESSES_CHANGED = "LoadBalancerAddressesChanged"
    EXPOSED = "Exposed"
    INSTANCE_STARTED = "InstanceStarted"
    INSTANCE_DIED = "InstanceDied"
    INSTANCE_RESTARTED = "InstanceRestarted"
    CONFIG_REJECTED = "ConfigRejected"
    RELOADED = "Reloaded"
    ALL_READY = "InstancesReady"
    PARTIALLY_READY = "PartiallyReady"
    NO_INSTANCE = "NoInstanceReady"
    INVALID_POOL_NAME = "InvalidPoolName"
    STATUS_NOT_WRITTEN = "StatusNotWritten"
    PARTS_LEFT_OUT = "PartsLeftOut"
    POOL_NOT_SHARED = "PoolNotShared"


# --- the LoadBalancerPool kind ------------------------------------------------------------------

POOL_NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
"""A pool name must be a valid DC/OS service name (the seed). Matched against the whole name
(`fullmatch`): Python's `$` also matches before a trailing newline, so `"abcd\n"` would pass."""
POOL_NAME_MAX = 63

# Bounds of the pool-level settings. A value beyond them cannot run (HAProxy refuses it, or the
# status it needs does not fit an apiserver request), so admission and the CRD refuse it up front.
MAX_CPUS = 64.0
"""HAProxy 2.6's MAX_THREADS on 64-bit builds (`haproxy -vv`: "MAX_THREADS=64"): `nbthread` above
it is refused, and cpus become threads (`threads_for`)."""
MAX_MEMORY_MIB = 65536
"""64 GiB per instance (maxconn 2,097,152): beyond any edge host's file limit already (each
connection takes two descriptors); the pool manager caps maxconn to the host's limit below it."""
MAX_INSTANCES = 100
"""Instances per pool. Each is its own pool manager (edge host), and the pool's status lists every
instance: 100 keep it far below the apiserver's request limit (3 MiB) even with many frontends."""

Protocol = Literal["TCP", "HTTP"]


def api_name(name: str) -> str:
    """A pool name as it goes into a request path: percent-encoded, so that a pool stored under a
    name no longer valid (before names were matched whole, e.g. `"abcd\n"`) can still be read,
    have its status written and be deleted (the HTTP client refuses raw control characters)."""
    return quote(name, safe="")


def is_pool_name(name: str) -> bool:
    """Whether `name` is a valid pool name (the whole string, no trailing newline)."""
    return len(name) <= POOL_NAME_MAX and re.fullmatch(POOL_NAME_PATTERN[1:-1], name) is not None


class PoolStats(KubeModel):
    bind_port: Int32 = Field(default=0, ge=0, le=65535)
    """0 (what the translator always asks): the pool manager allocates a free port and reports it."""


class BackendServer(KubeModel):
    address: str
    port: PortNumber


class RewriteHttpRequest(KubeModel):
    forwardfor: bool = True
    """Add `X-Forwarded-For` (the client address)."""
    x_forwarded_port: bool = True
    """Add `X-Forwarded-Port` (the frontend port the client reached)."""
    x_forwarded_proto: bool = True
    """Add `X-Forwarded-Proto` (`http`: pools do not terminate TLS)."""


class RewriteHttp(KubeModel):
    request: RewriteHttpRequest = Field(default_factory=RewriteHttpRequest)


class HealthCheck(KubeModel):
    """HAProxy `check` on every server of a backend (kube's probe field names). A server failing
    `failureThreshold` checks in a row gets no new connection until it passes `successThreshold`.

    TCP only connects: it finds a dead process or host (refused, unreachable), not a frozen one (the
    kernel still accepts its connections). HTTP sends `GET <path>` and needs an answer below 500
    within `timeoutSeconds`: it finds a frozen (SIGSTOPped) or hung server too."""

    protocol: Literal["TCP", "HTTP"] = "TCP"
    path: str = Field(default="/", pattern=r"^/[^\s]*$")
    period_seconds: int = Field(default=1, ge=1, le=300)
    timeout_seconds: int = Field(default=1, ge=1, le=60)
    failure_threshold: int = Field(default=2, ge=1, le=100)
    success_threshold: int = Field(default=2, ge=1, le=100)

    @classmethod
    def for_port(cls, name: str) -> HealthCheck:
        """The check for a Service port by its name: HTTP for `http` and `http-*` (the port naming
        kube's appProtocol inference and service meshes use), a connect check otherwise (a protocol
        we cannot speak must not be failed for not answering us)."""
        return cls(protocol="HTTP" if name == "http" or name.startswith("http-") else "TCP")


class PoolBackend(KubeModel):
    name: str = Field(min_length=1)
    protocol: Protocol = "TCP"
    balance: str = "roundrobin"
    servers: list[BackendServer] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    """Every server; a backend with none answers 503 (HTTP) or closes (TCP)."""
    rewrite_http: RewriteHttp | None = None
    """HTTP backends: request headers added toward the servers."""
    proxy_protocol: bool = False
    """TCP backends: send a PROXY protocol v2 header to every server (opt-in)."""
    health_check: HealthCheck | None = None
    """Check every server (HAProxy `check`); none: every server is assumed up."""


class LinkBackendMapEntry(KubeModel):
    """One routing rule; every set field must match. Entries are tried in list order (first match)."""

    backend: str
    host_eq: str | None = None
    """Host header equals (case-insensitive, any `:port` ignored)."""
    host_reg: str | None = None
    """Host header matches this regular expression (any `:port` removed first)."""
    path_beg: str | None = None
    """Path begins with (plain string prefix: the seed's and ImplementationSpecific's semantics)."""
    path_reg: str | None = None
    """Path matches this regular expression (Prefix pathType: segment boundaries)."""
    path_exact: str | None = None
    """Path equals (Exact pathType)."""


class LinkBackend(KubeModel):
    default_backend: str | None = None
    """Backend when no map entry matches; none: HTTP answers 404, TCP closes."""
    map: list[LinkBackendMapEntry] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)


class PoolFrontend(KubeModel):
    name: str = Field(min_length=1)
    bind_port: Int32 = Field(ge=0, le=65535)
    """0: the pool manager allocates one (reported in status)."""
    protocol: Protocol = "TCP"
    link_backend: LinkBackend = Field(default_factory=LinkBackend)


class PoolHAProxy(KubeModel):
    stats: PoolStats = Field(default_factory=PoolStats)
    frontends: list[PoolFrontend] = Field(default_factory=list, json_schema_extra=list_map("name"))
    backends: list[PoolBackend] = Field(default_factory=list, json_schema_extra=list_map("name"))


class LoadBalancerPoolSpec(KubeModel):
    role: str = PUBLIC_ROLE
    """`slave_public`: instances listen on the pool manager's public address; else its private one."""
    network: str = ""
    cpus: float = Field(default=0.1, gt=0, le=MAX_CPUS, allow_inf_nan=False)
    """Per instance; HAProxy threads = ceil(cpus)."""
    mem: int = Field(default=128, ge=1, le=MAX_MEMORY_MIB, json_schema_extra={"format": "int32"})
    """MiB per instance; HAProxy's maxconn is derived from it (`maxconn_for`)."""
    count: int = Field(default=1, ge=1, le=MAX_INSTANCES, json_schema_extra={"format": "int32"})
    """Instances: each its own HAProxy process on its own pool manager (edge host)."""
    cloud_provider_configuration: str | None = None
    """Raw JSON for a cloud load balancer, passed unchanged (an `ext--` pool)."""
    haproxy: PoolHAProxy = Field(default_factory=PoolHAProxy)


class PoolFrontendStatus(KubeModel):
    """Where one frontend is reachable (EdgeLB's per-frontend pool metadata)."""

    name: str
    port: Int32
    """The real bind port (the allocated one when the spec asked for 0)."""
    private_addresses: list[str] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    public_addresses: list[str] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)


class InstanceState(StrEnum):
    PENDING = "Pending"
    """Slot not held by any pool manager (no edge host free for it)."""
    STARTING = "Starting"
    RUNNING = "Running"
    FAILED = "Failed"
    """Config rejected, or the process keeps dying: `message` says why."""


class PoolInstanceStatus(KubeModel):
    slot: Int32 = Field(ge=0)
    state: InstanceState = InstanceState.PENDING
    holder: str = ""
    """The pool manager (edge host identity) running this instance."""
    private_address: str = ""
    public_address: str = ""
    stats_port: Int32 = 0
    pid: Int32 = 0
    """The HAProxy master process."""
    restarts: Int32 = 0
    observed_generation: int = 0
    """The pool generation this instance serves."""
    message: str = ""
    last_transition_time: Time | None = None
    frontends: list[PoolFrontendStatus] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)


class LoadBalancerPoolStatus(KubeModel):
    observed_generation: int | None = None
    ready: str = ""
    """`<ready>/<count>` (printer column)."""
    ready_instances: Int32 = 0
    addresses: str = ""
    """The serving instances' addresses, comma-separated (printer column)."""
    hostnames: list[str] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    frontends: list[PoolFrontendStatus] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    """Per frontend, the addresses and ports of every running instance (the translator's input)."""
    instances: list[PoolInstanceStatus] = Field(default_factory=list, json_schema_extra=list_map("slot"))
    conditions: Conditions = Field(default_factory=list)


class LoadBalancerPool(Resource):
    """An HAProxy pool: written by translators, run by pool managers."""

    crd = CRDInfo(
        group=ISTHMUS_GROUP,
        version=ISTHMUS_VERSION,
        kind="LoadBalancerPool",
        plural="loadbalancerpools",
        scope="Cluster",
        short_names=("lbp",),
        categories=("isthmus",),
        printer_columns=(
            PrinterColumn("Role", "string", ".spec.role", "slave_public: public; any other role: internal"),
            PrinterColumn("Ready", "string", ".status.ready", "Instances ready / desired"),
            PrinterColumn("Addresses", "string", ".status.addresses", "Addresses of the serving instances"),
            AGE_COLUMN,
        ),
    )

    spec: LoadBalancerPoolSpec = Field(default_factory=LoadBalancerPoolSpec)
    status: LoadBalancerPoolStatus = Field(default_factory=LoadBalancerPoolStatus)


LB_MODELS: tuple[type[Resource], ...] = (LoadBalancerPool,)
"""Every CRD of the load-balancing capability."""


def is_public(role: str) -> bool:
    return role == PUBLIC_ROLE


def threads_for(cpus: float) -> int:
    """HAProxy `nbthread` for a pool's cpus (at least one thread)."""
    return max(1, int(-(-cpus // 1)))


def maxconn_for(mem_mib: int) -> int:
    """HAProxy `maxconn` for a pool's memory: about 32 KiB per proxied connection (two buffers of
    16 KiB), at least 64."""
    return max(64, mem_mib * 1024 // 32)


# --- naming (the seed's "Naming of EdgeLB objects") ---------------------------------------------

EXT_PREFIX = "ext--"


def cluster_name_part(cluster: str) -> str:
    """The cluster name as it appears in names: forward slashes replaced by dots (the seed)."""
    return cluster.replace("/", ".")


def _shorten(name: str, limit: int) -> str:
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: limit - len(digest) - 1].rstrip('-')}-{digest}"


def pool_name(cluster: str, namespace: str, name: str, *, ext: bool = False) -> str:
    """`[ext--]<cluster>--<namespace>--<name>`, made a valid pool name: dots and other characters a
    DC/OS service name forbids become dashes, and a name longer than 63 characters keeps its start
    plus a hash of the whole (so two long names never collide)."""
    raw = f"{EXT_PREFIX if ext else ''}{cluster_name_part(cluster)}--{namespace}--{name}".lower()
    clean = re.sub(r"[^a-z0-9-]", "-", raw).strip("-")
    short = _shorten(clean, POOL_NAME_MAX)
    if not is_pool_name(short):  # pragma: no cover - the substitutions above guarantee it
        raise ValueError(f"cannot make a valid pool name from {raw!r}")
    return short


def automatic_pool_prefixes(cluster: str) -> tuple[str, str]:
    """How every automatic pool name of `cluster` begins (`<cluster>--`, `ext--<cluster>--`, as
    `pool_name` cleans the cluster name). Explicit names may not begin so unless they are the
    object's own automatic name: nobody can take another namespace's automatic pool name first."""
    clean = re.sub(r"[^a-z0-9-]", "-", cluster_name_part(cluster).lower()).strip("-")
    return f"{clean}--", f"{EXT_PREFIX}{clean}--"


def namespaces_in(value: str | None) -> set[str]:
    """The namespaces of a comma-separated annotation value (`*`: all)."""
    return {n.strip() for n in (value or "").split(",") if n.strip()}


def service_backend_name(cluster: str, namespace: str, service: str, port: int) -> str:
    """`<cluster>:<namespace>:<service>:<port>` (also the Service frontend's name)."""
    return f"{cluster_name_part(cluster)}:{namespace}:{service}:{port}"


service_frontend_name = service_backend_name


def ingress_backend_name(cluster: str, namespace: str, ingress: str, service: str, port: int | str) -> str:
    """`<cluster>:<namespace>:<ingress>:<service>:<port>`."""
    return f"{cluster_name_part(cluster)}:{namespace}:{ingress}:{service}:{port}"


def ingress_frontend_name(cluster: str, namespace: str, ingress: str) -> str:
    """`<cluster>:<namespace>:<ingress>` (one frontend per Ingress)."""
    return f"{cluster_name_part(cluster)}:{namespace}:{ingress}"


class Owner(BaseModel):
    """The Service or Ingress a frontend or backend belongs to, read from its name."""

    model_config = ConfigDict(frozen=True)

    cluster: str
    kind: Literal["Service", "Ingress"]
    namespace: str
    name: str


def frontend_owner(frontend: str) -> Owner | None:
    """The owner of a frontend named by the rules above (None: not named by a translator)."""
    parts = frontend.split(":")
    if len(parts) == 3 and all(parts):
        return Owner(cluster=parts[0], kind="Ingress", namespace=parts[1], name=parts[2])
    if len(parts) == 4 and all(parts) and parts[3].isdigit():
        return Owner(cluster=parts[0], kind="Service", namespace=parts[1], name=parts[2])
    return None


def backend_owner(backend: str) -> Owner | None:
    """The owner of a backend named by the rules above (None: not named by a translator)."""
    parts = backend.split(":")
    if len(parts) == 5 and all(parts):
        return Owner(cluster=parts[0], kind="Ingress", namespace=parts[1], name=parts[2])
    if len(parts) == 4 and all(parts) and parts[3].isdigit():
        return Owner(cluster=parts[0], kind="Service", namespace=parts[1], name=parts[2])
    return None


# --- the dklb-config configuration objects ------------------------------------------------------


class ConfigError(ValueError):
    """A `kubernetes.dcos.io/dklb-config` the translator cannot use; the message names the field."""


class CreationStrategy(StrEnum):
    IF_NOT_PRESENT = "IfNotPresent"
    """Create the pool whenever it does not exist."""
    ONCE = "Once"
    """Create the pool only if it has not existed before (POOL_CREATED_ANNOTATION remembers)."""
    NEVER = "Never"
    """Never create: the pool must be made out of band."""


class _Strict(BaseModel):
    """Unknown fields are errors; no type coercion (a quoted number is not a number)."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=False, validate_by_alias=True, extra="forbid", strict=True
    )

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Strategies(_Strict):
    creation: CreationStrategy = CreationStrategy.IF_NOT_PRESENT

    @field_validator("creation", mode="before")
    @classmethod
    def _enum(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in CreationStrategy._value2member_map_:
            raise ValueError(f"{v!r} is not one of {', '.join(s.value for s in CreationStrategy)}")
        return CreationStrategy(v) if isinstance(v, str) else v


class ServiceFrontend(_Strict):
    port: int = Field(ge=1, le=65535)
    """The pool's bind port for the Service port `servicePort`."""
    service_port: int = Field(ge=1, le=65535)


class IngressHttpFrontend(_Strict):
    port: int = Field(default=80, ge=1, le=65535)


class IngressFrontends(_Strict):
    http: IngressHttpFrontend = Field(default_factory=IngressHttpFrontend)


def _namespace_or_star(ns: str) -> str:
    if ns != "*" and (len(ns) > 63 or re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", ns) is None):
        raise ValueError(f"{ns!r} is neither a namespace name nor *")
    return ns


class _CommonConfig(_Strict):
    name: str | None = None
    role: str = PUBLIC_ROLE
    network: str | None = None
    cpus: float = Field(default=0.1, gt=0, le=MAX_CPUS, allow_inf_nan=False)
    memory: int = Field(default=128, ge=1, le=MAX_MEMORY_MIB)
    size: int = Field(default=1, ge=1, le=MAX_INSTANCES)
    strategies: Strategies = Field(default_factory=Strategies)
    shared_with: list[Annotated[str, AfterValidator(_namespace_or_star)]] | None = None
    """Isthmus's addition: namespaces (or `*`) that may join the pool this object creates by an
    explicit `name` (never an automatic `<cluster>--<ns>--<name>` pool)."""

    @field_validator("cpus", mode="before")
    @classmethod
    def _cpus_number(cls, v: Any) -> Any:
        # YAML `cpus: 1` is an int: accept whole numbers as floats, still refuse strings and bools.
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("name")
    @classmethod
    def _pool_name(cls, v: str | None) -> str | None:
        if v is not None and not is_pool_name(v):
            raise ValueError(
                f"{v!r} is not a valid pool name: at most {POOL_NAME_MAX} characters matching {POOL_NAME_PATTERN}"
            )
        return v

    @field_validator("role")
    @classmethod
    def _role(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @property
    def effective_network(self) -> str:
        """"" for a public pool unless given; `dcos`, forcibly, for any other role (the seed)."""
        if not is_public(self.role):
            return INTERNAL_NETWORK
        return self.network or ""

    @property
    def public(self) -> bool:
        return is_public(self.role)


class ServiceConfig(_CommonConfig):
    """The configuration object of a Service of type LoadBalancer (the seed's first table)."""

    frontends: list[ServiceFrontend] = Field(default_factory=list)
    cloud_provider_configuration: str | None = None
    proxy_protocol: bool = False
    """Isthmus's addition (the seed's phase 5 for TCP): send PROXY protocol v2 to the backends."""

    @field_validator("cloud_provider_configuration")
    @classmethod
    def _json(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            json.loads(v)
        except ValueError as e:
            raise ValueError(f"is not valid JSON: {e}") from None
        return v

    @model_validator(mode="after")
    def _unique_frontends(self) -> ServiceConfig:
        seen_ports: set[int] = set()
        seen_service_ports: set[int] = set()
        for i, f in enumerate(self.frontends):
            if f.service_port in seen_service_ports:
                raise ValueError(f"frontends[{i}].servicePort: {f.service_port} is mapped twice")
            if f.port in seen_ports:
                raise ValueError(f"frontends[{i}].port: {f.port} is used by another frontend")
            seen_ports.add(f.port)
            seen_service_ports.add(f.service_port)
        return self

    def frontend_port(self, service_port: int) -> int:
        """The pool's bind port for a Service port: `.frontends`' mapping, else the port itself
        (the seed). With `cloudProviderConfiguration`, `.frontends` is ignored."""
        if self.cloud_provider_configuration is None:
            for f in self.frontends:
                if f.service_port == service_port:
                    return f.port
        return service_port


class IngressConfig(_CommonConfig):
    """The configuration object of an Ingress of class edgelb (the seed's second table)."""

    frontends: IngressFrontends = Field(default_factory=IngressFrontends)


def _format_error(e: ValidationError) -> str:
    problems = []
    for err in e.errors():
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"]).replace(".[", "[")
        if err["type"] == "extra_forbidden":
            problems.append(f'unknown field "{loc}"')
        else:
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(problems)


def _duplicate_keys(node: yaml.Node | None, path: str = "") -> list[str]:
    """Keys given twice in one mapping, with their field paths. YAML loaders keep the last value
    silently; kube's strict decoding (and this parser's) refuses them instead."""
    out: list[str] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
            child = f"{path}.{name}" if path else name
            if name in seen:
                out.append(f'{child}: duplicate key (line {key.start_mark.line + 1}): give each field once')
            seen.add(name)
            out += _duplicate_keys(value, child)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out += _duplicate_keys(item, f"{path}[{i}]")
    return out


def _load_yaml(text: str) -> dict[str, Any]:
    try:
        duplicates = _duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader)) if text.strip() else []
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{DKLB_CONFIG_ANNOTATION} is not valid YAML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{DKLB_CONFIG_ANNOTATION} is nested too deeply to be a configuration object") from None
    if duplicates:
        raise ConfigError(f"invalid {DKLB_CONFIG_ANNOTATION}: {'; '.join(duplicates)}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{DKLB_CONFIG_ANNOTATION} must be a YAML mapping, not {type(data).__name__}")
    return data


def _parse(model: type[_CommonConfig], annotations: Mapping[str, str] | None) -> Any:
    annotations = annotations or {}
    data = _load_yaml(annotations.get(DKLB_CONFIG_ANNOTATION, ""))
    try:
        cfg = model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"invalid {DKLB_CONFIG_ANNOTATION}: {_format_error(e)}") from None
    legacy = annotations.get(CREATION_STRATEGY_ANNOTATION)
    if legacy is not None:
        if legacy not in CreationStrategy._value2member_map_:
            choices = ", ".join(s.value for s in CreationStrategy)
            raise ConfigError(f"invalid {CREATION_STRATEGY_ANNOTATION}: {legacy!r} is not one of {choices}")
        given = "strategies" in data and "creation" in (data.get("strategies") or {})
        if given and cfg.strategies.creation != legacy:
            raise ConfigError(
                f"{CREATION_STRATEGY_ANNOTATION} ({legacy}) contradicts {DKLB_CONFIG_ANNOTATION} "
                f".strategies.creation ({cfg.strategies.creation.value}): set one of them"
            )
        cfg.strategies.creation = CreationStrategy(legacy)
    return cfg


def parse_service_config(annotations: Mapping[str, str] | None) -> ServiceConfig:
    """The effective configuration of a Service (defaults filled); ConfigError names the problem."""
    cfg: ServiceConfig = _parse(ServiceConfig, annotations)
    return cfg


def parse_ingress_config(annotations: Mapping[str, str] | None) -> IngressConfig:
    """The effective configuration of an Ingress (defaults filled); ConfigError names the problem."""
    cfg: IngressConfig = _parse(IngressConfig, annotations)
    return cfg


IMMUTABLE_FIELDS = ("name", "role", "network")
"""Fields that cannot change once set (the seed: changing them strands the old pool)."""


def immutable_changes(old: Mapping[str, str] | None, new: Mapping[str, str] | None) -> list[str]:
    """Messages for every immutable field the new annotations change (a field set in the old config
    and different or removed in the new). Unparseable old configs constrain nothing."""
    try:
        before = _load_yaml((old or {}).get(DKLB_CONFIG_ANNOTATION, ""))
    except ConfigError:
        return []
    after = _load_yaml((new or {}).get(DKLB_CONFIG_ANNOTATION, ""))
    out = []
    for field in IMMUTABLE_FIELDS:
        if field in before and before.get(field) != after.get(field):
            out.append(
                f"{DKLB_CONFIG_ANNOTATION}: field {field} is immutable once set "
                f"(was {before[field]!r}, now {after.get(field)!r}); delete and re-create the object to change it"
            )
    return out


# --- pool status summary (every pool manager computes the same) ----------------------------------


def summarize_status(
    count: int,
    generation: int,
    instances: list[PoolInstanceStatus],
    public: bool,
    conditions: list[Condition] | None = None,
) -> LoadBalancerPoolStatus:
    """The pool's status from its instances: slots beyond `count` dropped, missing slots Pending,
    the printer-column fields, per-frontend addresses of the Running instances, and `Ready`
    (at least one instance serves the current generation)."""
    by_slot = {i.slot: i for i in instances if i.slot < count}
    full = [by_slot.get(s) or PoolInstanceStatus(slot=s, message="no pool manager holds this slot") for s in range(count)]
    serving = [i for i in full if i.state == InstanceState.RUNNING and i.observed_generation == generation]
    running = [i for i in full if i.state == InstanceState.RUNNING]
    frontends: dict[str, PoolFrontendStatus] = {}
    for inst in running:
        for fe in inst.frontends:
            agg = frontends.setdefault(fe.name, PoolFrontendStatus(name=fe.name, port=fe.port))
            agg.private_addresses = sorted({*agg.private_addresses, *fe.private_addresses})
            agg.public_addresses = sorted({*agg.public_addresses, *fe.public_addresses})
    addresses: set[str] = set()
    for inst in running:
        addresses |= {a for a in (inst.public_address if public else "", inst.private_address) if a}
    if serving:
        cond = new_condition(
            READY, True, Reason.ALL_READY if len(serving) == count else Reason.PARTIALLY_READY,
            f"{len(serving)} of {count} instances serve generation {generation}",
        )
    else:
        why = "; ".join(f"slot {i.slot}: {i.message}" for i in full if i.message) or "no instance runs yet"
        cond = new_condition(READY, False, Reason.NO_INSTANCE, why[:1000])
    return LoadBalancerPoolStatus(
        observed_generation=generation if serving and len(serving) == len(running) else None,
        ready=f"{len(serving)}/{count}",
        ready_instances=len(serving),
        addresses=",".join(sorted(addresses)),
        frontends=sorted(frontends.values(), key=lambda f: f.name),
        instances=full,
        conditions=merge_conditions(conditions, [cond]),
    )
