"""Server-side apply and managedFields (fieldsV1) bookkeeping: the field manager every write goes through.

Modelled on sigs.k8s.io/structured-merge-diff as kube-apiserver uses it (its fieldmanager package):

- Apply: the manager owns exactly what its configuration sets (struct fields only as leaves; map entries
  and list items always, so they get ``"."``). Update: the manager gains what the write added or changed.
- A write that changes or adds a path owned by another manager conflicts (Apply) or silently takes it
  over (Update, or Apply with force). Removed paths leave every manager.

`server_side_apply` and `track_update` are what registry/store.py calls; the package's other modules
are their parts: fieldpath.py (paths and fieldsV1), typed.py (values read through their schema,
comparison), managedfields.py (the entries), merge.py (apply's merge and prune). A create's fields
are computed here by a walk compiled per schema (`_FieldsNode`), falling back to the general one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from isthmus.apiserver.apimachinery.errors import ApiError, bad_request
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.fieldmanager.fieldpath import (
    STRIPPED_EXACT,
    STRIPPED_TREE,
    Path,
    compact_json,
    element_sort_key,
    iterate_paths,
    path_string,
)
from isthmus.apiserver.fieldmanager.managedfields import (
    APPLY,
    BEFORE_FIRST_APPLY,
    UPDATE,
    Entry,
    decode_entries,
    managed_fields_of,
    with_managed_fields,
    without_managed_fields,
)
from isthmus.apiserver.fieldmanager.merge import clean, merge_applied, prune_removed, without_nulls
from isthmus.apiserver.fieldmanager.typed import (
    applied_fields,
    compare_objects,
    fill_keys,
    find_duplicates,
    items_of,
    list_kind_of,
    strip_untracked,
)
from isthmus.apiserver.openapi.schema import resolve_all_of


def _conflict_error(conflicts: list[tuple[Entry, Path]]) -> ApiError:
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {e.describe()}", "field": path_string(p)}
        for e, p in conflicts
    ]
    if len(conflicts) == 1:
        e, p = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {e.describe()}: {path_string(p)}"
    else:
        lines: list[str] = []
        current: Entry | None = None
        for e, p in conflicts:
            if e is not current:
                lines.append(f"conflicts with {e.describe()}:")
                current = e
            lines.append(f"- {path_string(p)}")
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})


def server_side_apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    *,
    manager: str,
    force: bool,
    schema: dict[str, Any] | None,
    api_version: str,
    now: str,
    subresource: str = "",
    default: Callable[[dict[str, Any]], None] | None = None,
    owned: bool = False,
) -> dict[str, Any]:
    """Merge `applied` (the manager's full intent) into `live` (None = create) and return the new object
    with metadata.managedFields updated: the manager owns exactly the fields it applied; fields it applied
    before and omits now are removed unless another manager owns them; a field owned by another manager
    with a different value → errors.ApiError 409 Conflict (causes per field, kube's message) unless force,
    which transfers ownership. Lists merge per x-kubernetes-list-type (map by list-map-keys / set / atomic).

    default: the kind's defaulting (in place); list-map items of the configuration are compared by
    their keys as defaulted (see fill_keys).

    owned: `applied` is the caller's own copy, which the result may take parts of and which may be
    changed (the store's apply decodes a fresh one per attempt): no copy of it is made."""
    root, schema = schema, resolve_all_of(schema)
    if managed_fields_of(applied) is not None:
        raise bad_request("metadata.managedFields must be nil")
    config = applied if owned else without_managed_fields(applied)
    if live is None:
        try:
            encoded = _created_apply_fields(config, _fields_root(root), ())  # before nulls go (owned)
        except _NeedsGeneralWalk:
            pass
        else:
            return _apply_created(config, encoded, manager, api_version, now, subresource, owned)
    filled: set[Path] = set()
    if default is not None:
        defaulted = clone(config)  # in C; read only for the keys defaulting fills, so exact types do not matter
        default(defaulted)
        fill_keys(config, defaulted, schema, (), filled)
    duplicate = find_duplicates(config, schema)
    if duplicate:
        gv = str(applied.get("apiVersion") or api_version)
        gvk = f"{gv if '/' in gv else '/' + gv}, Kind={applied.get('kind', '')}"
        raise bad_request(f"failed to create typed patch object ({gvk}): {duplicate}")

    base = without_managed_fields(live, stored=True) if live is not None else {}
    entries = decode_entries(managed_fields_of(live))
    if live is not None and not entries:
        # An object nobody tracked yet: its current fields belong to "before-first-apply", so the first
        # applier conflicts with them instead of silently taking them (kube does the same).
        untracked = compare_objects({}, base, schema).changed
        if untracked:
            entries.append(Entry(BEFORE_FIRST_APPLY, UPDATE, api_version, now, subresource, untracked))

    me = Entry(manager, APPLY, api_version, None, subresource, set())
    previous = next((e for e in entries if e.ident == me.ident), None)
    others = [e for e in entries if e.ident != me.ident]
    last = previous.fields if previous is not None else set()

    fields: set[Path] = set()
    applied_fields(config, schema, (), fields)
    me.fields = strip_untracked(fields) - filled
    if live is None:
        me.time = now
        return with_managed_fields(clean(config), [me])

    merged = merge_applied(base, config, schema)
    if not isinstance(merged, dict):
        merged = {}
    owned_by_anyone = set(me.fields).union(*(e.fields for e in others))
    result = prune_removed(merged, last, owned_by_anyone, schema)

    comparison = compare_objects(base, result, schema)
    changed = comparison.changed
    conflicts: list[tuple[Entry, Path]] = []
    for other in sorted(others, key=lambda e: e.ident):
        conflicts.extend((other, p) for p in iterate_paths(other.fields & changed))
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for other in others:
        other.fields -= changed
        other.fields -= comparison.removed

    object_changed = bool(changed or comparison.removed)
    if previous is not None and not object_changed and previous.fields == me.fields and previous.time:
        me.time = previous.time  # a no-op apply leaves managedFields as they were
    else:
        me.time = now
    return with_managed_fields(result, [*others, me])


def _apply_created(config: dict[str, Any], encoded: dict[str, Any], manager: str, api_version: str, now: str,
                   subresource: str, owned: bool) -> dict[str, Any]:
    """The object an apply creates: the configuration without nulls, its manager's one entry."""
    created: dict[str, Any] = without_nulls(config) if owned else clean(config)
    if encoded:
        meta = created.get("metadata")
        if not isinstance(meta, dict):
            meta = created["metadata"] = {}
        meta["managedFields"] = [{"manager": manager, "operation": APPLY, "apiVersion": api_version,
                                  "time": now, "fieldsType": "FieldsV1", "fieldsV1": encoded,
                                  **({"subresource": subresource} if subresource else {})}]
    return created


_STRIPPED_TOP: Final = frozenset(p[0] for p in STRIPPED_EXACT if len(p) == 1)
_STRIPPED_META: Final = frozenset(p[1] for p in STRIPPED_EXACT if len(p) == 2 and p[0] == "f:metadata")
_UNSET: Final = object()


class _FieldsNode:
    """A schema (allOf resolved) as a create's managedFields walk reads it, worked out once: whether
    a map is atomic and a list granular, and each field's schema. Kept per schema (_fields_root)."""

    __slots__ = ("_addl", "_items", "_kids", "_props", "atomic_map", "granular_list", "list_kind", "s")

    def __init__(self, s: dict[str, Any]) -> None:
        self.s = s
        self.atomic_map = s.get("x-kubernetes-map-type") == "atomic"
        self.list_kind = list_kind_of(s)
        self.granular_list = self.list_kind.kind != "atomic"
        props = s.get("properties")
        self._props: dict[str, Any] = props if isinstance(props, dict) else {}
        self._kids: dict[str, _FieldsNode | None] = {}
        self._addl: Any = _UNSET
        self._items: Any = _UNSET

    def kid(self, key: str) -> _FieldsNode | None:
        if key in self._props:
            node = self._kids.get(key, _UNSET)
            if node is _UNSET:
                node = self._kids[key] = _fields_node(self._props[key])
            return node  # type: ignore[return-value]
        if self._addl is _UNSET:  # a map's keys are data: one node for all of them
            self._addl = _fields_node(self.s.get("additionalProperties"))
        return self._addl  # type: ignore[no-any-return]

    def items(self) -> _FieldsNode | None:
        if self._items is _UNSET:
            self._items = _fields_node(self.s.get("items"))
        return self._items  # type: ignore[no-any-return]

    def declares(self, key: str) -> bool:
        return key in self._props


def _fields_node(s: Any) -> _FieldsNode | None:
    resolved = resolve_all_of(s)
    return None if resolved is None else _FieldsNode(resolved)


_FIELDS_ROOTS: dict[int, tuple[dict[str, Any], _FieldsNode | None]] = {}


def _fields_root(schema: dict[str, Any] | None) -> _FieldsNode | None:
    """The compiled root of a kind's schema (by identity; the entry keeps the schema alive, so its id
    is never reused meanwhile)."""
    if schema is None:
        return None
    hit = _FIELDS_ROOTS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    if len(_FIELDS_ROOTS) >= 4096:
        _FIELDS_ROOTS.clear()  # CRD schemas replaced many times over: start again
    node = _fields_node(schema)
    _FIELDS_ROOTS[id(schema)] = (schema, node)
    return node


def _created_fields(obj: dict[str, Any], node: _FieldsNode | None) -> dict[str, Any]:
    """The fieldsV1 of every granular path of a created object, as encode_fields(strip_untracked(paths)) writes
    the paths _add_all finds, built in one walk: a create owns all of its object, so it needs no
    comparison, no path set and no tree. Only the top level and metadata's fields can be stripped."""
    out: dict[str, Any] = {}
    if node is not None and node.atomic_map:
        return out
    for k in sorted(obj):  # fields sort by name (element_sort_key)
        child = obj[k]
        pe = "f:" + k
        if not isinstance(child, (dict, list)):
            if pe not in _STRIPPED_TOP:
                out[pe] = {}  # a leaf: as _enter enters it, without its schema
            continue
        sub = node.kid(k) if node is not None else None
        if pe == "f:metadata" and isinstance(child, dict) and not (sub is not None and sub.atomic_map):
            inner: dict[str, Any] = {}
            for mk in sorted(child):
                mpe = "f:" + mk
                if mpe == "f:managedFields":
                    continue
                v = child[mk]
                if not isinstance(v, (dict, list)):
                    if mpe not in _STRIPPED_META:
                        inner[mpe] = {}
                else:  # _enter, without its call: v is a container
                    _put(inner, mpe, _fields_of(v, sub.kid(mk) if sub is not None else None), mpe not in _STRIPPED_META)
            if inner:
                out[pe] = inner  # metadata itself is stripped
        else:
            _put(out, pe, _fields_of(child, sub), pe not in _STRIPPED_TOP)  # _enter: child is a container
    return out


def _enter(out: dict[str, Any], pe: str, child: Any, node: _FieldsNode | None, member: bool = True) -> None:
    """_fields_of one child, entered in its parent's fieldsV1 (`out`) under `pe`; member: whether the
    child's own path is in the set."""
    _put(out, pe, _fields_of(child, node) if isinstance(child, (dict, list)) else None, member)


def _fields_of(value: Any, node: _FieldsNode | None) -> dict[str, Any]:
    """The fieldsV1 below a value, none of it stripped."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        if node is not None and node.atomic_map:
            return out
        for k in sorted(value):
            child = value[k]
            if isinstance(child, (dict, list)):
                inner = _fields_of(child, node.kid(k) if node is not None else None)
                out["f:" + k] = {".": {}, **inner} if inner else {}
            else:
                out["f:" + k] = {}  # a leaf, the most common child
    elif node is not None and node.granular_list:
        items = items_of(value, node.s)
        items.sort(key=lambda c: element_sort_key(c[0]))
        items_node = node.items()
        for pe, item in items:
            _enter(out, pe, item, items_node if pe.startswith("k:") else None)
    return out


def _created_child(out: dict[str, Any], pe: str, child: Any, node: _FieldsNode | None, path: Path | None,
                   member: bool = True) -> None:
    """_created_apply_fields of one child, entered in its parent's (`out`) under `pe`; member: whether
    the child's own path is in the set."""
    below: Path | None = None
    if path is not None:
        child_path = (*path, pe)
        if child_path == STRIPPED_TREE:
            return
        member = member and child_path not in STRIPPED_EXACT
        below = child_path if len(child_path) < 2 else None
    _put(out, pe, _created_apply_fields(child, node, below) if isinstance(child, (dict, list)) else None, member)


def _put(out: dict[str, Any], pe: str, inner: dict[str, Any] | None, member: bool) -> None:
    """A child's fieldsV1 (`inner`, None for a leaf) entered in its parent's under `pe`; member: whether
    the child's own path is in the set (then "." marks it where it has children)."""
    if inner:
        out[pe] = {".": {}, **inner} if member else inner
    elif member:
        out[pe] = {}


class _NeedsGeneralWalk(Exception):
    """_created_apply_fields met what only server_side_apply's general steps handle."""


def _created_apply_fields(value: Any, node: _FieldsNode | None, path: Path | None) -> dict[str, Any]:
    """The fieldsV1 of an apply that creates (its only entry): encode_fields(strip_untracked(paths)) of the
    paths applied_fields finds, built in one walk over the compiled schema (_FieldsNode). path:
    where value is, while it is shallow enough (depth < 2) for strip_untracked to concern its children; None
    below. The walk also stands for find_duplicates and fill_keys: it raises _NeedsGeneralWalk where
    they would act (the general steps then run, path set and all) — a list-map item
    without one of its keys (defaulting may give it one), a duplicate item (the general path names
    the first, as kube does), a set of objects or a list item that is a list (find_duplicates looks
    inside them). A configuration without any of these needs neither the defaulted copy nor a
    second walk, which is nearly every apply that creates."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        if node is not None and node.atomic_map:
            return out
        for k in sorted(value):  # fields sort by name (element_sort_key)
            child = value[k]
            if isinstance(child, dict):
                sub = node.kid(k) if node is not None else None
                inner = sub is None or not sub.atomic_map
            elif isinstance(child, list):
                sub = node.kid(k) if node is not None else None
                inner = sub is not None and sub.granular_list
            else:
                sub, inner = None, False
            if not inner and path is None:
                out["f:" + k] = {}  # a leaf below what can be stripped: the most common child
                continue
            member = not inner or child == {} or node is None or not node.declares(k)
            _created_child(out, "f:" + k, child if inner else None, sub, path, member)
    elif isinstance(value, list) and node is not None and node.granular_list:
        kind = node.list_kind
        seen: set[str] = set()
        keyed_items: list[tuple[str, Any]] = []
        for item in value:
            if kind.kind == "map" and isinstance(item, dict):
                keys: dict[str, Any] = {}
                for k in kind.keys:
                    if k not in item:
                        raise _NeedsGeneralWalk
                    keys[k] = item[k]
                pe = "k:" + compact_json(keys)
            elif isinstance(item, (dict, list)):
                raise _NeedsGeneralWalk
            else:
                pe = "v:" + compact_json(item)
            if pe in seen:
                raise _NeedsGeneralWalk
            seen.add(pe)
            keyed_items.append((pe, item))
        if len(keyed_items) > 1:  # (a sort key of a keyed item decodes its keys)
            keyed_items.sort(key=lambda c: element_sort_key(c[0]))
        items_node = node.items()
        for pe, item in keyed_items:
            keyed = pe.startswith("k:")
            _created_child(out, pe, item if keyed else None, items_node if keyed else None, path)
    return out


def track_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    schema: dict[str, Any] | None,
    api_version: str,
    now: str,
    subresource: str = "",
) -> dict[str, Any]:
    """For non-apply writes (create/update/patch): record an `Update` operation entry for `manager`
    owning the fields it changed/set, and remove those fields from other managers' sets. Returns new with
    metadata.managedFields set."""
    # A client may rewrite managedFields on the main resource; an empty list (or none) means "keep what
    # the server has", so clients unaware of managedFields never wipe them (kube's rule). [{}] resets.
    meta = new.get("metadata")
    given = meta.get("managedFields") if isinstance(meta, dict) else None  # managed_fields_of(new)
    if old is None and not (isinstance(given, list) and given and not subresource):
        # A create with no entries to keep: the manager gets the whole object, in one walk. (The
        # calls without_managed_fields(new, deep=False) and _fields_root would make are inlined:
        # this runs for every create.)
        created = dict(new)
        if isinstance(meta, dict):
            meta = created["metadata"] = dict(meta)
            meta.pop("managedFields", None)
        hit = _FIELDS_ROOTS.get(id(schema)) if schema is not None else None
        fields = _created_fields(created, hit[1] if hit is not None and hit[0] is schema else _fields_root(schema))
        if fields:
            encoded: dict[str, Any] = {"manager": manager, "operation": UPDATE, "apiVersion": api_version}
            if now:
                encoded["time"] = now
            encoded["fieldsType"] = "FieldsV1"
            encoded["fieldsV1"] = fields  # as Entry.encode writes it
            if subresource:
                encoded["subresource"] = subresource
            if not isinstance(meta, dict):
                meta = created["metadata"] = {}
            meta["managedFields"] = [encoded]
        return created
    schema = resolve_all_of(schema)
    source = given if isinstance(given, list) and given and not subresource else managed_fields_of(old)
    entries = decode_entries(source)

    before = without_managed_fields(old, deep=False) if old is not None else {}
    after = without_managed_fields(new, deep=False)
    comparison = compare_objects(before, after, schema)
    changed = comparison.changed

    me = Entry(manager, UPDATE, api_version, None, subresource, set())
    previous = next((e for e in entries if e.ident == me.ident), None)
    for entry in entries:
        entry.fields -= changed
        entry.fields -= comparison.removed
    others = [e for e in entries if e is not previous]
    if changed:
        me.fields = (previous.fields if previous is not None else set()) | changed
        me.time = now
        entries = [*others, me]
    return with_managed_fields(after, entries)
