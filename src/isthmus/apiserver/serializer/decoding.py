"""Request bodies decoded as kube's strict decoders read them: duplicate keys are reported.

kube decodes JSON with sigs.k8s.io/json's UnmarshalStrict and YAML with yaml.v2's strict
mode: the object is the same as a lenient decode (the last of duplicate keys wins), plus a
list of strict errors that fieldValidation decides about (Strict fails the request, Warn
turns each into a warning, Ignore drops them). Unknown fields are the schema's to find
(registry/store.py prunes them); this module finds what only the raw bytes show.

- JSON: `duplicate field "spec.paused"` (kube's field path: `a.b[0].c`).
- YAML: `line 5: key "name" already set in map`, gathered by kube under one
  `yaml: unmarshal errors:` error.
- Protobuf cannot repeat a key: nothing to report.

Nesting is bounded as kube bounds it (its JSON and YAML decoders refuse more than 10,000 levels
with "exceeded max depth"), at MAX_DEPTH here: past it the body is a 400, never a recursion
error deep in the server. Every recursive walk of an object (schema, pruning, managedFields,
patches, orjson's own 255-level writer) then stays well inside its limits.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
import yaml
from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.serializer import protobuf

MAX_DEPTH: Final = 128  # levels of objects and lists an object may nest (its root is level 1)


def nesting_over(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """'{' or '[' (the container that goes one level past `limit`), or None: the value nests no deeper.
    A walk with its own stack, so that a value too deep for Python's recursion is measured too."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            return "{" if isinstance(v, dict) else "["
        children = v.values() if isinstance(v, dict) else v
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return None


def too_deep(yaml_text: bool, char: str = "{") -> errors.ApiError:
    """The 400 kube's decoders give a body nested too deep (encoding/json, yaml.v2 words)."""
    if yaml_text:
        return errors.bad_request(f"error converting YAML to JSON: yaml: exceeded max depth of {MAX_DEPTH}")
    return errors.bad_request(f"couldn't get version/kind; json parse error: invalid character '{char}' "
                              "exceeded max depth")


def check_depth(raw: bytes, value: Any, yaml_text: bool = False) -> None:
    """Raise too_deep when `value` (decoded from `raw`) nests past MAX_DEPTH. Free for nearly every
    body: a body with no more brackets (and, for YAML, lines) than MAX_DEPTH cannot nest deeper."""
    if not isinstance(value, (dict, list)):
        return
    bound = raw.count(b"{") + raw.count(b"[") + (raw.count(b"\n") if yaml_text else 0)
    if bound > MAX_DEPTH and (char := nesting_over(value)) is not None:
        raise too_deep(yaml_text, char)


@dataclass
class StrictIssues:
    """What a strict decoder reports about a body besides unknown fields."""

    duplicates: list[str] = field(default_factory=list)  # JSON: field paths; YAML: "line N: key ..." texts
    yaml: bool = False
    patch: bool = False  # the body is a patch (kube answers strict errors on patches with a 422)
    prefix: str = ""  # "json patch " for the operations of a JSON patch
    order: dict[str, int] | None = None  # JSON objects with duplicates: where each field path comes

    def __bool__(self) -> bool:
        return bool(self.duplicates)

    def combined(self, unknown: list[str], builtin: bool) -> tuple[list[str], list[str]]:
        """(the errors of `strict decoding error: ...`, the warnings of fieldValidation=Warn) for these
        duplicates and the unknown fields the schema found, in kube's order: a typed JSON body as
        the decoder meets them, a patch its own problems first, YAML its unmarshal errors first
        (unknown fields sorted after patches and YAML)."""
        dups = self.duplicates
        if builtin and not self.yaml:
            # kube's typed decoder reports a field both unknown and duplicated only as unknown
            known = set(unknown)
            dups = [p for p in dups if p not in known]
        unknown_msgs = [f'unknown field "{p}"' for p in (sorted(unknown) if self.yaml or self.patch else unknown)]
        if self.yaml:
            lines = sorted(dups, key=lambda t: int(t.split(":", 1)[0].split()[-1]))
            errs = ["yaml: unmarshal errors:\n  " + "\n  ".join(lines)] if lines else []
            return errs + unknown_msgs, lines + unknown_msgs
        dup_msgs = [(p, f'{self.prefix}duplicate field "{p}"') for p in dups]
        if self.patch or not self.order:
            msgs = [m for _, m in dup_msgs] + unknown_msgs
        else:
            order, end = self.order, len(self.order)
            keyed = [(order.get(p, end), m) for p, m in dup_msgs]
            keyed += [(order.get(p, end), f'unknown field "{p}"') for p in unknown]
            msgs = [m for _, m in sorted(keyed, key=lambda x: x[0])]
        return msgs, msgs


class _Dups(dict[str, Any]):
    """A JSON object that had duplicate keys (the last value of each kept, like a lenient decode)."""

    dup_keys: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    out = _Dups(d)
    seen: set[str] = set()
    out.dup_keys = []
    for k, _ in pairs:
        if k in seen and k not in out.dup_keys:
            out.dup_keys.append(k)
        seen.add(k)
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"invalid JSON value {name}")


def _dup_paths(value: Any, path: str, out: list[str]) -> None:
    if isinstance(value, dict):
        if isinstance(value, _Dups):
            out.extend(f"{path}.{k}" if path else k for k in value.dup_keys)
        for k, v in value.items():
            _dup_paths(v, f"{path}.{k}" if path else k, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _dup_paths(v, f"{path}[{i}]", out)


def _plain(value: Any) -> Any:
    """The decoded value with plain dicts only (what the rest of the server expects)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


_QUOTE_SPACE = re.compile(rb'"[ \n\t\r]')  # one pass instead of four `in` scans
# orjson decodes an integer past 64 bits as a float (json keeps the int), and writes a float that
# large (1e18 and up) with an exponent of 18 or more.
_BIG_FLOAT = re.compile(rb"\de\+(?:1[89]|[2-9]\d|\d{3})")


def _without_duplicates(raw: bytes, yaml_text: bool = False) -> Any:
    """The value of raw when it certainly repeats no key, else _UNSURE (the full decode decides).

    Each `":` in the text ends a key, or is a quote (escaped) followed by a colon inside a string;
    orjson's compact encoding of the decoded value writes every key and every such quote the same
    way. So the two counts of `":` differ by the keys the text repeated (which the decoded value
    lost) and what they held, unless whitespace comes before a key's colon (then a quote is
    followed by whitespace) or the text escapes a quote or colon as \\u0022 or \\u003a: those, and
    integers orjson turned into floats, are left to the full decode. Counting in the re-encoded
    bytes keeps the check in C: a walk of the decoded value cost more than the decode. orjson is
    strict JSON: what it refuses (NaN, lone surrogates, UTF-16) the full decode judges as before."""
    if _QUOTE_SPACE.search(raw) is not None:
        return _UNSURE
    if b"\\u00" in raw and (b"\\u0022" in raw or b"\\u003a" in raw or b"\\u003A" in raw):
        return _UNSURE
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _UNSURE
    if not isinstance(value, (dict, list)):
        return _UNSURE
    check_depth(raw, value, yaml_text)  # orjson writes no more than 255 levels
    again = orjson.dumps(value)
    if raw.count(b'":') != again.count(b'":') or (b"e+" in again and _BIG_FLOAT.search(again) is not None):
        return _UNSURE
    return value


_UNSURE = object()


def json_duplicates(raw: bytes) -> tuple[Any, list[str]] | None:
    """(decoded value, paths of duplicate keys) or None when raw is not valid JSON."""
    value = _without_duplicates(raw)
    if value is not _UNSURE:
        return value, []
    return _decode_with_duplicates(raw)


def _decode_with_duplicates(raw: bytes, yaml_text: bool = False) -> tuple[Any, list[str]] | None:
    """json_duplicates the long way: every object's pairs seen by a hook."""
    found = False

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        d = _pairs(pairs)
        if isinstance(d, _Dups):
            found = True
        return d

    try:
        value = json.loads(raw, object_pairs_hook=hook, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return None
    check_depth(raw, value, yaml_text)
    if not found:
        return value, []
    paths: list[str] = []
    _dup_paths(value, "", paths)
    return _plain(value), paths


def _alias_ratio(decoded: int) -> float:
    """yaml.v2's allowedAliasRatio: 99 % of a small document may come from aliases, 10 % of a huge one."""
    low, high = 400_000, 4_000_000
    if decoded <= low:
        return 0.99
    if decoded >= high:
        return 0.10
    return 0.99 - 0.89 * (decoded - low) / (high - low)


class _Loader(yaml.SafeLoader):
    """SafeLoader refusing what yaml.v2 refuses of aliases: one inside its own anchor's value (a
    recursive value, which no walk of the object survives), and a document whose aliases expand
    to far more than it spells out (a "billion laughs": a few lines that are 10^9 values to write)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._open_anchors: set[str] = set()
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:  # yaml.v2's words, as kube prints them
                raise yaml.composer.ComposerError(None, None, f"yaml: anchor '{event.anchor}' value contains itself")
            self._aliases += 1
            return super().compose_node(parent, index)
        anchor = getattr(event, "anchor", None)
        if anchor is None:
            return super().compose_node(parent, index)
        self._open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.discard(anchor)

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if self._aliases and node is not None:
            literal, decoded = _expansion(node)
            aliased = decoded - literal
            if aliased > 100 and decoded > 1000 and aliased / decoded > _alias_ratio(decoded):
                raise yaml.composer.ComposerError(None, None, "yaml: document contains excessive aliasing")
        return node


def _expansion(root: yaml.Node) -> tuple[int, int]:
    """(nodes the document spells out, nodes it decodes to with every alias expanded), counted
    without expanding anything: each node's expanded size once, reused wherever an alias points."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes and not children_done:
            continue
        kids: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            kids = node.value
        elif isinstance(node, yaml.MappingNode):
            kids = [n for pair in node.value for n in pair]
        if children_done:
            sizes[id(node)] = 1 + sum(sizes[id(k)] for k in kids)
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return len(sizes), sizes[id(root)]


def yaml_load(raw: bytes) -> Any:
    """A YAML document, leniently (the last of duplicate keys wins), as _Loader allows it."""
    loader = _Loader(raw)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class _StrictLoader(_Loader):
    """_Loader that records duplicate mapping keys (yaml.v2's strict-mode messages) instead of
    silently keeping the last one."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.duplicate_keys: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hashable = key in seen
            except TypeError:
                continue
            if hashable:
                self.duplicate_keys.append(f'line {key_node.start_mark.line + 1}: key {json.dumps(str(key))} '
                                           "already set in map")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def yaml_duplicates(raw: bytes) -> tuple[Any, list[str]]:
    """(decoded value, yaml.v2 strict messages for duplicate keys). Raises yaml.YAMLError."""
    loader = _StrictLoader(raw)
    try:
        value = loader.get_single_data()
    finally:
        loader.dispose()
    return value, loader.duplicate_keys


def yaml_duplicate_lines(raw: bytes) -> list[str]:
    """yaml.v2's messages for the duplicate keys of a document (JSON included); [] if unreadable as YAML."""
    try:
        return sorted(yaml_duplicates(raw)[1], key=lambda t: int(t.split(":", 1)[0].split()[-1]))
    except yaml.YAMLError:
        return []


def decode_strict(raw: bytes, ctype: str, check: bool = True) -> tuple[Any, StrictIssues]:
    """A request body (kube protobuf, JSON, or YAML when the content type says so) and what a strict
    decoder says about it (check=False: nothing, fieldValidation=Ignore); errors worded as
    handlers/common.decode words them."""
    if ctype == protobuf.CONTENT_TYPE:
        return protobuf_object(raw), StrictIssues()
    if not raw.strip():
        raise errors.bad_request("the request body is empty")
    yaml_text = "yaml" in ctype  # JSON is YAML too: a YAML body's problems are worded as YAML's
    if check:
        value = _without_duplicates(raw, yaml_text)  # json_duplicates' first step, the one nearly every body takes
        if value is not _UNSURE:
            return value, StrictIssues()
        decoded = _decode_with_duplicates(raw, yaml_text)
        if decoded is not None:
            value, dups = decoded
            return value, StrictIssues(dups, order=document_order(value) if dups else None)
    else:
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            check_depth(raw, value, yaml_text)
            return value, StrictIssues()
    if not yaml_text:
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise json_error(e, raw) from None
    try:
        if not check:
            value = yaml_load(raw)
            check_depth(raw, value, yaml_text=True)
            return value, StrictIssues()
        value, dups = yaml_duplicates(raw)
    except yaml.YAMLError as e:
        raise errors.bad_request(f"error converting YAML to JSON: {str(e).splitlines()[0]}") from None
    except RecursionError:  # PyYAML's composer recurses once per level: far past MAX_DEPTH
        raise too_deep(yaml_text=True) from None
    check_depth(raw, value, yaml_text=True)
    return value, StrictIssues(dups, yaml=True)


def protobuf_object(raw: bytes) -> Any:
    """A protobuf body, held to the same depth as JSON (a CRD's schema nests in protobuf too)."""
    value = protobuf.decode_object(raw)
    if (char := nesting_over(value)) is not None:
        raise too_deep(yaml_text=False, char=char)
    return value


def json_error(e: orjson.JSONDecodeError, raw: bytes = b"") -> errors.ApiError:
    """A body that is not JSON, in the words of kube's decoder."""
    if str(e).startswith("depth limit exceeded"):  # orjson reads no more than 1024 levels
        return too_deep(yaml_text=False, char="[" if raw[e.pos : e.pos + 1] == b"[" else "{")
    return errors.bad_request(f"couldn't get version/kind; json parse error: {e}")


def document_order(value: Any) -> dict[str, int]:
    """Field paths (kube's `a.b[0].c`) of a decoded object in the order a decoder meets them."""
    order: dict[str, int] = {}

    def walk(v: Any, path: str) -> None:
        if isinstance(v, dict):
            for k, child in v.items():
                p = f"{path}.{k}" if path else str(k)
                order.setdefault(p, len(order))
                walk(child, p)
        elif isinstance(v, list):
            for i, child in enumerate(v):
                p = f"{path}[{i}]"
                order.setdefault(p, len(order))
                walk(child, p)

    walk(value, "")
    return order


async def read_body_strict(request: web.Request, max_body_bytes: int, field_validation: str) -> tuple[Any, StrictIssues]:
    """The request body (as handlers/common.read_body reads it) and its strict decoding issues."""
    if request.content_length is not None and request.content_length > max_body_bytes:
        raise errors.too_large(max_body_bytes)
    raw = await request.read()
    return decode_strict(raw, request.content_type or "application/json", check=field_validation != "Ignore")
