"""Base of every resource Isthmus owns: pydantic v2 models shaped like Kubernetes objects.

Field names are snake_case in Python and camelCase on the wire (aliases); attribute
docstrings become the CRD schema descriptions (`kubectl explain`). `to_dict()` drops
unset (None) fields, like Go's `omitempty`, so a model can be sent as a server-side
apply body without claiming fields it never set.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Generic, Literal, Self, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer, model_validator
from pydantic.alias_generators import to_camel

# --- scalar types -------------------------------------------------------------------------------


def _utc_seconds(value: datetime) -> datetime:
    """metav1.Time has second precision and is UTC; normalise so read-back values compare equal."""
    if value.tzinfo is UTC and not value.microsecond:
        return value  # already normal (every value read back, every model dumped)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0)


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, exactly as the apiserver writes metav1.Time."""
    return _utc_seconds(value).isoformat()[:-6] + "Z"  # whole seconds in UTC: "...T08:01:02+00:00"


def now() -> datetime:
    """Current time as metav1.Time (UTC, whole seconds)."""
    return _utc_seconds(datetime.now(UTC))


Time = Annotated[
    datetime,
    AfterValidator(_utc_seconds),
    PlainSerializer(format_time, return_type=str, when_used="json"),
]
"""metav1.Time: parsed from RFC 3339, UTC, whole seconds; `date-time` string in schemas."""

Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1, json_schema_extra={"format": "int32"})]
Int64 = Annotated[int, Field(json_schema_extra={"format": "int64"})]
PortNumber = Annotated[int, Field(ge=1, le=65535, json_schema_extra={"format": "int32"})]

DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123Label = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL_PATTERN)]
"""A DNS-1123 label (RFC 1123): what Kubernetes requires of namespace names and we of cluster IDs."""

IPV4_CIDR_PATTERN = (
    r"^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
    r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/(3[0-2]|[12]?[0-9])$"
)
IPv4CIDR = Annotated[str, Field(pattern=IPV4_CIDR_PATTERN)]
"""An IPv4 CIDR such as 243.0.0.0/8 (ClusterSet IPs are IPv4 only, as in Submariner)."""

StringMap = dict[str, str]

# --- the base model -----------------------------------------------------------------------------


class KubeModel(BaseModel):
    """snake_case attributes, camelCase JSON; unknown fields from newer servers are ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        extra="ignore",
        use_enum_values=False,
    )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form sent to the API (camelCase, None fields omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Parse the JSON form (a dict, or anything with `to_dict()`, e.g. a lightkube object)."""
        if not isinstance(data, dict) and hasattr(data, "to_dict"):
            data = data.to_dict()
        return cls.model_validate(data)


# --- metadata -----------------------------------------------------------------------------------


class OwnerReference(KubeModel):
    """metav1.OwnerReference: the owner is garbage-collected before its dependents."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    """metav1.ObjectMeta, the fields controllers read and write."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    deletion_grace_period_seconds: int | None = None
    labels: StringMap | None = None
    annotations: StringMap | None = None
    finalizers: list[str] | None = None
    owner_references: list[OwnerReference] | None = None
    managed_fields: list[dict[str, Any]] | None = None


class ListMeta(KubeModel):
    """metav1.ListMeta."""

    resource_version: str | None = None
    continue_: str | None = Field(default=None, alias="continue")
    remaining_item_count: int | None = None


# --- conditions (metav1.Condition) --------------------------------------------------------------

ConditionStatus = Literal["True", "False", "Unknown"]
CONDITION_TYPE_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(KubeModel):
    """Condition contains details for one aspect of the current state of this API Resource."""

    # kube's schema requires message and lastTransitionTime although Go code may leave them empty.
    model_config = ConfigDict(
        json_schema_extra={"required": ["type", "status", "lastTransitionTime", "reason", "message"]}
    )

    type: str = Field(max_length=316, pattern=CONDITION_TYPE_PATTERN)
    """type of condition in CamelCase or in foo.example.com/CamelCase."""
    status: ConditionStatus
    """status of the condition, one of True, False, Unknown."""
    observed_generation: int | None = Field(default=None, ge=0, json_schema_extra={"format": "int64"})
    """observedGeneration represents the .metadata.generation that the condition was set based upon."""
    last_transition_time: Time = Field(default_factory=now)
    """lastTransitionTime is the last time the condition transitioned from one status to another."""
    reason: str = Field(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    """reason contains a programmatic identifier (CamelCase) indicating the reason for the condition's last transition."""
    message: str = Field(default="", max_length=32768)
    """message is a human readable message indicating details about the transition. This may be an empty string."""

    @property
    def is_true(self) -> bool:
        return self.status == "True"


def status_str(value: bool | ConditionStatus) -> ConditionStatus:
    """`True`/`False` from a bool; `Unknown` etc. pass through."""
    if isinstance(value, bool):
        return "True" if value else "False"
    return value


def new_condition(
    type_: str,
    status: bool | ConditionStatus,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
    at: datetime | None = None,
) -> Condition:
    """Build a Condition; `status` may be a bool. `str(...)` strips StrEnum members to plain strings."""
    return Condition(
        type=str(type_),
        status=status_str(status),
        reason=str(reason),
        message=message,
        observed_generation=observed_generation,
        last_transition_time=at or now(),
    )


def find_condition(conditions: Iterable[Condition] | None, type_: str) -> Condition | None:
    """The condition of that type, or None."""
    for cond in conditions or ():
        if cond.type == type_:
            return cond
    return None


def is_condition_true(conditions: Iterable[Condition] | None, type_: str) -> bool:
    cond = find_condition(conditions, type_)
    return cond is not None and cond.status == "True"


def set_condition(conditions: list[Condition], new: Condition, at: datetime | None = None) -> bool:
    """Set `new` in `conditions` (in place), like apimachinery's meta.SetStatusCondition.

    `lastTransitionTime` only moves when the status changes (to `new`'s time, or `at`, or now);
    reason, message and observedGeneration are always updated. Returns whether anything changed,
    so a reconciler can skip a no-op status write.
    """
    stamp = _utc_seconds(at or new.last_transition_time)
    for i, old in enumerate(conditions):
        if old.type != new.type:
            continue
        if old.status != new.status:
            conditions[i] = new.model_copy(update={"last_transition_time": stamp})
            return True
        same = (old.reason, old.message, old.observed_generation) == (
            new.reason,
            new.message,
            new.observed_generation,
        )
        if not same:
            conditions[i] = new.model_copy(update={"last_transition_time": old.last_transition_time})
        return not same
    conditions.append(new.model_copy(update={"last_transition_time": stamp}))
    return True


def remove_condition(conditions: list[Condition], type_: str) -> bool:
    """Drop the condition of that type (in place); returns whether it was there."""
    before = len(conditions)
    conditions[:] = [c for c in conditions if c.type != type_]
    return len(conditions) != before


def merge_conditions(
    existing: Iterable[Condition] | None,
    desired: Iterable[Condition],
    *,
    keep_others: bool = True,
    at: datetime | None = None,
) -> list[Condition]:
    """Pure form of set_condition for reconcilers: the observed conditions with every desired one set.

    Unchanged statuses keep their observed `lastTransitionTime`; with `keep_others=False`, condition
    types not in `desired` are dropped. Order: existing order, then new types in desired order.
    """
    desired = list(desired)
    wanted = {c.type for c in desired}
    result = [c.model_copy() for c in existing or () if keep_others or c.type in wanted]
    for cond in desired:
        set_condition(result, cond, at=at)
    return result


def conditions_equal(a: Iterable[Condition] | None, b: Iterable[Condition] | None) -> bool:
    """Same set of conditions regardless of order (for "did the status change?" checks)."""
    key = lambda c: c.type  # noqa: E731
    return sorted(a or (), key=key) == sorted(b or (), key=key)


# --- resources ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrinterColumn:
    """A CRD additionalPrinterColumns entry (`kubectl get` columns)."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str | None = None
    priority: int = 0
    format: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        if self.format:
            out["format"] = self.format
        return out


AGE_COLUMN = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


@dataclass(frozen=True)
class CRDInfo:
    """How a resource model is served: everything the CRD manifest needs besides the schema.

    `version` is the storage version, the one Isthmus's clients speak; `older_versions` are served
    too, with the same schema (kube's `None` conversion only rewrites apiVersion), so objects and
    clients written for them keep working while a cluster migrates (mcs-api v0.5: v1alpha1 beside
    v1beta1)."""

    group: str
    version: str
    kind: str
    plural: str
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = (AGE_COLUMN,)
    status_subresource: bool = True
    singular: str = field(default="")
    annotations: tuple[tuple[str, str], ...] = ()
    """On the CRD itself, e.g. the `api-approved.kubernetes.io` a `*.k8s.io` group needs (about-api)."""
    older_versions: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def versions(self) -> tuple[str, ...]:
        """Every served version, oldest first; the storage version (`version`) last."""
        return (*self.older_versions, self.version)

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" for v in self.versions)

    @property
    def crd_name(self) -> str:
        """metadata.name of the CRD: `<plural>.<group>`."""
        return f"{self.plural}.{self.group}"

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def namespaced(self) -> bool:
        return self.scope == "Namespaced"


class Resource(KubeModel):
    """A top-level object of one of our CRDs; subclasses declare `crd` and their spec/status.

    apiVersion and kind are filled from `crd`, so they are written nowhere else.
    """

    crd: ClassVar[CRDInfo]

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @model_validator(mode="after")
    def _fill_type_meta(self) -> Self:
        info = type(self).crd
        # An object of an older served version reads as the storage one: the schemas are the same.
        if self.api_version and self.api_version not in info.api_versions:
            raise ValueError(f"apiVersion {self.api_version!r} is not {info.api_version!r}")
        if self.kind and self.kind != info.kind:
            raise ValueError(f"kind {self.kind!r} is not {info.kind!r}")
        self.api_version, self.kind = info.api_version, info.kind
        return self

    @property
    def name(self) -> str:
        """metadata.name ('' when unset)."""
        return self.metadata.name or ""

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace

    def deepcopy(self) -> Self:
        return copy.deepcopy(self)


R = TypeVar("R", bound=Resource)


class ResourceList(KubeModel, Generic[R]):
    """`<Kind>List` as returned by a list call."""

    api_version: str = ""
    kind: str = ""
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[R] = Field(default_factory=list)


def list_map(*keys: str) -> dict[str, Any]:
    """Schema extension for a list merged by key (SSA and strategic merge treat items as a map)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


ATOMIC_LIST: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}
"""Schema extension for a list replaced as a whole (one owner)."""

Conditions = Annotated[list[Condition], Field(json_schema_extra=list_map("type"))]
"""status.conditions: a list keyed by type, as kube declares it."""
