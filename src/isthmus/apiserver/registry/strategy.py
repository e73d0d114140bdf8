"""Strategies: what is particular to one resource type, as kube's pkg/registry/<group>/<kind>/strategy.go.

The generic store (registry/store.py) calls the hooks of the resource's strategy in a fixed
order and never asks which kind it writes. The base class is the generic behaviour; a kind
overrides only what kube does differently for it.

Create: (generic: namespace, generateName, server-owned metadata) → status dropped when it is a
subresource → prepare_for_create → initial_status → schema defaults → default → prune → validate
(metadata by `name_rule`, schema, then `validate`) → warnings_on_create → canonicalize.
Update: (generic: name, namespace, resourceVersion precondition) → through /status,
`status_strategy.prepare_for_update`; otherwise status kept from the live object, then
prepare_for_update and the server-owned metadata restored → schema defaults → default → prune →
validate_update → warnings_on_update → canonicalize.
Delete: `holds_deletion` keeps a deleting object like a finalizer would; `prepare_for_delete`
marks it when deletion starts. Reads: `field_selectors`, `table_columns` and `table_row`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.apimachinery.selectors import FieldGetter, field_path
from isthmus.apiserver.authentication.authenticators import Authenticator, UserInfo
from isthmus.apiserver.registry.table import Column, JSONPathPrinter

Obj = dict[str, Any]
Cause = dict[str, str]




def fields(*paths: str) -> dict[str, FieldGetter]:
    """Selectable fields read as their dotted paths (what every built-in kind needs so far)."""
    return {p: field_path(p) for p in paths}


class StatusStrategy:
    """How a write to the status subresource changes the object: status moves, the rest stays stored."""

    def prepare_for_update(self, new: Obj, old: Obj) -> Obj:
        """The object to store: `old` with `new`'s status (none if `new` has none)."""
        keep: Obj = clone(old)
        if "status" in new:
            keep["status"] = new["status"]
        else:
            keep.pop("status", None)
        return keep


class ScaleStrategy:
    """Where a kind keeps what its scale subresource reads and writes (kube's autoscaling/v1 Scale).

    Paths are dotted, as a CRD's subresources.scale declares them; handlers/scale.py serves it.
    """

    def __init__(self, spec_replicas: str = "spec.replicas", status_replicas: str = "status.replicas",
                 label_selector: str | None = None) -> None:
        self.spec_replicas = spec_replicas
        self.status_replicas = status_replicas
        self.label_selector = label_selector

    @staticmethod
    def _get(obj: Any, path: str) -> Any:
        for key in path.split("."):
            if not isinstance(obj, dict):
                return None
            obj = obj.get(key)
        return obj

    def replicas(self, obj: Obj) -> int:
        value = self._get(obj, self.spec_replicas)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def status_replicas_of(self, obj: Obj) -> int:
        value = self._get(obj, self.status_replicas)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def set_replicas(self, obj: Obj, replicas: int) -> None:
        *parents, last = self.spec_replicas.split(".")
        for key in parents:
            child = obj.get(key)
            if not isinstance(child, dict):
                child = obj[key] = {}
            obj = child
        obj[last] = replicas

    def selector(self, obj: Obj) -> str:
        """The Scale's status.selector: the label selector as a string (metav1.LabelSelector, as
        LabelSelectorAsSelector(...).String() prints it; a plain map as SelectorFromSet does)."""
        if self.label_selector is None:
            return ""
        sel = self._get(obj, self.label_selector)
        if not isinstance(sel, dict):
            return ""
        if not ({"matchLabels", "matchExpressions"} & sel.keys()) and all(isinstance(v, str) for v in sel.values()):
            return ",".join(f"{k}={v}" for k, v in sorted(sel.items()))  # a map (ReplicationController)
        reqs: list[tuple[str, str]] = [(k, f"{k}={v}") for k, v in (sel.get("matchLabels") or {}).items()]
        for r in sel.get("matchExpressions") or []:
            if not isinstance(r, dict):
                continue
            key, op, values = str(r.get("key", "")), r.get("operator"), sorted(set(r.get("values") or []))
            text = {"In": f"{key} in ({','.join(values)})", "NotIn": f"{key} notin ({','.join(values)})",
                    "Exists": key, "DoesNotExist": f"!{key}"}.get(str(op))
            if text is not None:
                reqs.append((key, text))
        return ",".join(text for _, text in sorted(reqs, key=lambda r: r[0]))


@dataclass(frozen=True)
class VirtualRequest:
    """What a virtual type's create is answered from besides the body (kube's request context)."""

    user: UserInfo  # who sent the request
    authenticator: Authenticator  # the server's authenticator chain (TokenReview asks it)


class Strategy:
    """The generic behaviour; one instance per served resource type (version)."""

    # How metadata.name is validated: "subdomain" (DNS-1123 subdomain), "label" (DNS-1123 label)
    # or "dns1035" (DNS-1035 label), as meta.validate_name knows them.
    name_rule: ClassVar[str] = "subdomain"
    # Other path segments that name a served subresource: {path name: subresource}.
    subresource_aliases: ClassVar[Mapping[str, str]] = {}
    # Whether a built-in kind's schema enforces its model's required fields; False when `validate`
    # reports missing fields itself, in kube's words (the schema check would pre-empt it).
    schema_required: ClassVar[bool] = True
    # Field selectors beyond metadata.name and metadata.namespace: field → how it is read from the
    # stored object (the storage version: a field label of another version reads its stored field).
    field_selectors: Mapping[str, FieldGetter] = {}
    # Printer columns in CRD additionalPrinterColumns shape; the default table prints them.
    printer_columns: list[Obj] = []
    status_strategy: StatusStrategy = StatusStrategy()
    scale_strategy: ScaleStrategy | None = None
    # False for kube's virtual, create-only types (reviews, bindings): a create is answered by
    # `create_virtual` and nothing is stored.
    stored: ClassVar[bool] = True
    # Whether a create may set status although it is a subresource (kube's Nodes); else it is dropped.
    keeps_status_on_create: ClassVar[bool] = False
    # Which hooks a kind leaves as the generic no-ops, worked out per class: the store skips calling
    # those (a Python call costs a request about 0.7 µs of server CPU; a create has ~150).
    plain_create: ClassVar[bool] = True  # prepare_for_create, initial_status, warnings_on_create, canonicalize
    plain_default: ClassVar[bool] = True  # default
    plain_storage: ClassVar[bool] = True  # to_storage, from_storage: served as stored

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)

        def generic(*hooks: str) -> bool:
            return all(getattr(cls, h) is getattr(Strategy, h) for h in hooks)

        cls.plain_create = generic("prepare_for_create", "initial_status", "warnings_on_create", "canonicalize")
        cls.plain_default = generic("default")
        cls.plain_storage = generic("to_storage", "from_storage")

    # ---------------------------------------------------------------- create and update

    def default(self, obj: Obj) -> None:
        """The Go defaulting kube applies to this kind (pkg/apis/*/v1/defaults.go); after schema defaults."""

    def prepare_for_create(self, obj: Obj) -> None:
        """Normalize a new object before validation (server-owned fields, finalizers)."""

    def initial_status(self, obj: Obj) -> Obj | None:
        """The status kube gives a new object (after prepare_for_create); None leaves it alone."""
        return None

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        """Normalize an update of the main resource before validation (fields only the server moves)."""

    def validate(self, obj: Obj) -> list[Cause]:
        """Kind-specific causes for a 422 on create, beyond metadata and schema."""
        return []

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        """Kind-specific causes for a 422 on update; by default the create rules on the new object."""
        return self.validate(new)

    def warnings_on_create(self, obj: Obj) -> list[str]:
        return []

    def warnings_on_update(self, new: Obj, old: Obj) -> list[str]:
        return []

    def canonicalize(self, obj: Obj) -> None:
        """Last normalization before storing (after validation)."""

    def to_storage(self, obj: Obj) -> Obj:
        """This version's object as the resource's storage version keeps it (kube's conversion);
        an object already in the storage version is returned as is."""
        return obj

    def from_storage(self, obj: Obj) -> Obj:
        """A stored object as this version serves it; one already in this version is returned as is."""
        return obj

    def create_virtual(self, obj: Obj, request: VirtualRequest) -> Obj:
        """The answer to a create of a virtual type (`stored` False): the object with its status."""
        raise NotImplementedError

    # ---------------------------------------------------------------- delete

    def holds_deletion(self, obj: Obj) -> bool:
        """True while something besides metadata.finalizers keeps a deleting object stored."""
        return False

    def prepare_for_delete(self, obj: Obj) -> None:
        """Mark an object whose graceful deletion is being recorded (deletionTimestamp set)."""

    def deletion_grace(self, obj: Obj, options: Obj) -> int:
        """Seconds a delete leaves the object stored (deletionTimestamp = now + grace) for its owner
        to finish with it; 0 deletes at once (kube's CheckGracefulDelete: only Pods wait)."""
        return 0

    # ---------------------------------------------------------------- reads

    def table_columns(self) -> list[Column]:
        return self._jsonpath_printer.columns

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        """One Table row's cells, in the order of table_columns (now: for ages)."""
        return self._jsonpath_printer.row(obj, now)

    @cached_property
    def _jsonpath_printer(self) -> JSONPathPrinter:
        return JSONPathPrinter(self.printer_columns)

    @property
    def has_defaults(self) -> bool:
        return type(self).default is not Strategy.default
