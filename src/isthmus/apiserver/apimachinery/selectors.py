"""Label and field selectors, with kube's syntax and error messages.

The label selector parser mirrors k8s.io/apimachinery/pkg/labels (lexer, parser and the
validation in NewRequirement), so that malformed selectors fail with the words kubectl users
already know from real clusters. The field selector parser mirrors k8s.io/apimachinery/pkg/fields.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from isthmus.apiserver.apimachinery import errors, validation

# ----- validation: k8s.io/apimachinery/pkg/util/validation, in validation.py ------------

_qualified_name_errors = validation.is_qualified_name
_label_value_errors = validation.is_valid_label_value


def _go_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _invalid(path: str, value: str, detail: str) -> str:
    """field.Invalid(...).Error(); kube parses with a nil path, printed as "<nil>"."""
    return f"{path}: Invalid value: {_go_quote(value)}: {detail}"


def _aggregate(msgs: list[str]) -> str:
    return msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"


_INT_RE = re.compile(r"[+-]?[0-9]+")


def _parse_int64(s: str) -> int | None:
    """Go's strconv.ParseInt(s, 10, 64): no spaces or underscores, must fit 64 bits."""
    if not _INT_RE.fullmatch(s):
        return None
    n = int(s)
    return n if -(2**63) <= n < 2**63 else None


class _SelectorError(Exception):
    pass


# ----- label selector lexer and parser (k8s.io/apimachinery/pkg/labels/selector.go) -------


class _Tok(Enum):
    ERROR = "error"
    EOS = "eos"
    CLOSED_PAR = ")"
    COMMA = ","
    DOES_NOT_EXIST = "!"
    DOUBLE_EQUALS = "=="
    EQUALS = "="
    GREATER_THAN = ">"
    IDENTIFIER = "identifier"
    IN = "in"
    LESS_THAN = "<"
    NOT_EQUALS = "!="
    NOT_IN = "notin"
    OPEN_PAR = "("


_STRING_TO_TOKEN = {
    ")": _Tok.CLOSED_PAR,
    ",": _Tok.COMMA,
    "!": _Tok.DOES_NOT_EXIST,
    "==": _Tok.DOUBLE_EQUALS,
    "=": _Tok.EQUALS,
    ">": _Tok.GREATER_THAN,
    "in": _Tok.IN,
    "<": _Tok.LESS_THAN,
    "!=": _Tok.NOT_EQUALS,
    "notin": _Tok.NOT_IN,
    "(": _Tok.OPEN_PAR,
}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"


def _lex(s: str) -> list[tuple[_Tok, str]]:
    """All tokens up to and including EOS (kube scans the whole input before parsing)."""
    out: list[tuple[_Tok, str]] = []
    i, n = 0, len(s)
    while True:
        while i < n and s[i] in _WHITESPACE:
            i += 1
        if i >= n:
            out.append((_Tok.EOS, ""))
            return out
        if s[i] in _SPECIAL:
            buf = ""
            last: tuple[_Tok, str] | None = None
            while i < n and s[i] in _SPECIAL:
                buf += s[i]
                tok = _STRING_TO_TOKEN.get(buf)
                if tok is not None:
                    last = (tok, buf)
                elif last is not None:
                    break
                i += 1
            if last is None:
                out.append((_Tok.ERROR, f"error expected: keyword found '{buf}'"))
            else:
                out.append(last)
            continue
        start = i
        while i < n and s[i] not in _SPECIAL and s[i] not in _WHITESPACE:
            i += 1
        word = s[start:i]
        out.append((_STRING_TO_TOKEN.get(word, _Tok.IDENTIFIER), word))


class _Op(Enum):
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


_OP_FOR_TOKEN = {
    _Tok.DOES_NOT_EXIST: _Op.DOES_NOT_EXIST,
    _Tok.EQUALS: _Op.EQUALS,
    _Tok.DOUBLE_EQUALS: _Op.DOUBLE_EQUALS,
    _Tok.GREATER_THAN: _Op.GREATER_THAN,
    _Tok.LESS_THAN: _Op.LESS_THAN,
    _Tok.IN: _Op.IN,
    _Tok.NOT_EQUALS: _Op.NOT_EQUALS,
    _Tok.NOT_IN: _Op.NOT_IN,
}


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "exists" | "!" | "=" | "==" | "!=" | "in" | "notin" | "gt" | "lt"
    values: frozenset[str]

    def matches(self, labels: dict[str, str]) -> bool:
        op = self.op
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        if op in ("=", "==", "in"):
            v = labels.get(self.key)
            return v is not None and v in self.values
        if op in ("!=", "notin"):
            v = labels.get(self.key)
            return v is None or v not in self.values
        v = labels.get(self.key)
        have = None if v is None else _parse_int64(v)
        if have is None:
            return False
        want = _parse_int64(next(iter(self.values)))
        assert want is not None  # validated when parsed
        return have > want if op == "gt" else have < want


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def _at(self, pos: int, values: bool) -> tuple[_Tok, str]:
        tok, lit = self.items[min(pos, len(self.items) - 1)]
        if values and tok in (_Tok.IN, _Tok.NOT_IN):
            tok = _Tok.IDENTIFIER  # "in"/"notin" are plain words where a value is expected
        return tok, lit

    def lookahead(self, values: bool = True) -> tuple[_Tok, str]:
        return self._at(self.pos, values)

    def consume(self, values: bool = True) -> tuple[_Tok, str]:
        self.pos += 1
        return self._at(self.pos - 1, values)

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok in (_Tok.IDENTIFIER, _Tok.DOES_NOT_EXIST):
                try:
                    reqs.append(self.requirement())
                except _SelectorError as e:
                    raise _SelectorError(f"unable to parse requirement: {e}") from None
                t, lit2 = self.consume()
                if t == _Tok.EOS:
                    return reqs
                if t == _Tok.COMMA:
                    t2, l2 = self.lookahead()
                    if t2 not in (_Tok.IDENTIFIER, _Tok.DOES_NOT_EXIST):
                        raise _SelectorError(f"found '{l2}', expected: identifier after ','")
                else:
                    raise _SelectorError(f"found '{lit2}', expected: ',' or 'end of string'")
            elif tok == _Tok.EOS:
                return reqs
            else:
                raise _SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> Requirement:
        key, op = self.key_and_inferred_operator()
        if op in (_Op.EXISTS, _Op.DOES_NOT_EXIST):
            return Requirement(key, op.value, frozenset())
        op = self.operator()
        values: set[str] = set()
        if op in (_Op.IN, _Op.NOT_IN):
            values = self.values()
        elif op in (_Op.EQUALS, _Op.DOUBLE_EQUALS, _Op.NOT_EQUALS, _Op.GREATER_THAN, _Op.LESS_THAN):
            values = self.exact_value()
        return _new_requirement(key, op, sorted(values))

    def key_and_inferred_operator(self) -> tuple[str, _Op | None]:
        op: _Op | None = None
        tok, lit = self.consume()
        if tok == _Tok.DOES_NOT_EXIST:
            op = _Op.DOES_NOT_EXIST
            tok, lit = self.consume()
        if tok != _Tok.IDENTIFIER:
            raise _SelectorError(f"found '{lit}', expected: identifier")
        errs = _qualified_name_errors(lit)
        if errs:
            raise _SelectorError(_invalid("<nil>", lit, "; ".join(errs)))
        t, _ = self.lookahead()
        if t in (_Tok.EOS, _Tok.COMMA) and op is None:
            op = _Op.EXISTS
        return lit, op

    def operator(self) -> _Op:
        tok, lit = self.consume(values=False)
        op = _OP_FOR_TOKEN.get(tok)
        if op is None:
            raise _SelectorError(f"found '{lit}', expected: {_BINARY_OPERATORS}")
        return op

    def values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != _Tok.OPEN_PAR:
            raise _SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in (_Tok.IDENTIFIER, _Tok.COMMA):
            s = self.identifiers()
            if self.consume()[0] != _Tok.CLOSED_PAR:
                raise _SelectorError(f"found '{lit}', expected: ')'")
            return s
        if tok == _Tok.CLOSED_PAR:  # "()"
            self.consume()
            return {""}
        raise _SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def identifiers(self) -> set[str]:
        s: set[str] = set()
        while True:
            tok, lit = self.consume()
            if tok == _Tok.IDENTIFIER:
                s.add(lit)
                t2, l2 = self.lookahead()
                if t2 == _Tok.COMMA:
                    continue
                if t2 == _Tok.CLOSED_PAR:
                    return s
                raise _SelectorError(f"found '{l2}', expected: ',' or ')'")
            if tok == _Tok.COMMA:  # "(," ",," ",)" stand for empty values
                if not s:
                    s.add("")
                t2, _ = self.lookahead()
                if t2 == _Tok.CLOSED_PAR:
                    s.add("")
                    return s
                if t2 == _Tok.COMMA:
                    self.consume()
                    s.add("")
                continue
            raise _SelectorError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        tok, _ = self.lookahead()
        if tok in (_Tok.EOS, _Tok.COMMA):
            return {""}
        tok, lit = self.consume()
        if tok == _Tok.IDENTIFIER:
            return {lit}
        raise _SelectorError(f"found '{lit}', expected: identifier")


def _new_requirement(key: str, op: _Op, values: list[str]) -> Requirement:
    """labels.NewRequirement's checks on the values (the key was validated while parsing)."""
    msgs: list[str] = []
    if op in (_Op.GREATER_THAN, _Op.LESS_THAN):
        # The parser always yields exactly one value for these operators.
        for i, v in enumerate(values):
            if _parse_int64(v) is None:
                msgs.append(
                    _invalid(f"values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer")
                )
    for i, v in enumerate(values):
        errs = _label_value_errors(v)
        if errs:
            msgs.append(_invalid(f"values[{i}][{key}]", v, "; ".join(errs)))
    if msgs:
        raise _SelectorError(_aggregate(msgs))
    return Requirement(key, op.value, frozenset(values))


class LabelSelector:
    """Parsed `labelSelector` (=, ==, !=, in, notin, exists, !key). Empty string matches everything."""

    __slots__ = ("requirements",)

    def __init__(self, requirements: list[Requirement] | None = None) -> None:
        self.requirements: tuple[Requirement, ...] = tuple(requirements or ())

    @property
    def empty(self) -> bool:
        """True when it selects everything (the server can skip filtering)."""
        return not self.requirements

    def matches(self, labels: dict[str, str] | None) -> bool:
        if not self.requirements:
            return True
        lbl = labels or {}
        return all(r.matches(lbl) for r in self.requirements)

    def __repr__(self) -> str:
        return f"LabelSelector({self.requirements!r})"


# ----- field selectors (k8s.io/apimachinery/pkg/fields/selector.go) -----------------------

_META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


# How a selectable field is read from an object: the string kube compares.
FieldGetter = Callable[[dict[str, Any]], str]


@dataclass(frozen=True, slots=True)
class FieldTerm:
    field: str
    op: str  # "=" (also for "==") or "!="
    value: str
    getter: FieldGetter | None = None  # None: the field is read as a path (field_value)


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string form kube compares: missing → "", booleans lower-case, numbers as written."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
        if cur is None:
            return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, str):
        return cur
    if isinstance(cur, int | float):
        return str(cur)
    return ""


class FieldSelector:
    """Parsed `fieldSelector` (=, ==, != on metadata.name, metadata.namespace and kind-specific fields)."""

    __slots__ = ("terms",)

    def __init__(self, terms: list[FieldTerm] | None = None) -> None:
        self.terms: tuple[FieldTerm, ...] = tuple(terms or ())

    @property
    def empty(self) -> bool:
        return not self.terms

    def equals_value(self, field: str) -> str | None:
        """The value `field` must equal, if a term pins it (lets the server turn
        metadata.name=x into a single get instead of a scan)."""
        for t in self.terms:
            if t.field == field and t.op == "=":
                return t.value
        return None

    def matches(self, obj: dict[str, Any]) -> bool:
        for t in self.terms:
            have = t.getter(obj) if t.getter is not None else field_value(obj, t.field)
            if (have == t.value) != (t.op == "="):
                return False
        return True

    def __repr__(self) -> str:
        return f"FieldSelector({self.terms!r})"


def _split_terms(text: str) -> list[str]:
    """Split on commas not escaped by a backslash."""
    terms: list[str] = []
    start = 0
    in_slash = False
    for i, c in enumerate(text):
        if in_slash:
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """First operator occurrence splits; "!=" and "==" are tried before "=" at each position."""
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def _unescape(value: str) -> str:
    if not any(c in value for c in "\\,="):
        return value
    out: list[str] = []
    in_slash = False
    for c in value:
        if in_slash:
            if c not in "\\,=":
                raise _SelectorError(f"invalid field selector: invalid escape sequence: \\{c}")
            out.append(c)
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c in ",=":
            # Go prints the rune with %v, i.e. as its number; keep kube's wording exactly.
            raise _SelectorError(f"invalid field selector: unescaped character in value: {ord(c)}")
        else:
            out.append(c)
    if in_slash:
        raise _SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_label_selector(text: str | None) -> LabelSelector:
    """Raises errors.bad_request with kube's wording on a malformed selector."""
    if not text:
        return LabelSelector()
    try:
        return LabelSelector(_LabelParser(text).parse())
    except _SelectorError as e:
        raise errors.bad_request(str(e)) from None


def field_path(path: str) -> FieldGetter:
    """A getter reading `path` (dotted) the way kube's field selectors compare it."""
    return lambda obj: field_value(obj, path)


def parse_field_selector(
    text: str | None,
    allowed: Collection[str] | Mapping[str, FieldGetter] | None = None,
    *,
    builtin: bool = True,
) -> FieldSelector:
    """allowed: fields this kind supports beyond metadata.name and metadata.namespace, as paths or
    as field → getter; an unsupported field → errors.bad_request('field label not supported: X').

    Wording follows kube: kinds with their own selectable fields (pods, …) and CRDs
    (builtin=False) say `field label not supported: X`; other built-in kinds fall back to
    `"X" is not a known field selector: only "metadata.name", "metadata.namespace"`.
    """
    if not text:
        return FieldSelector()
    getters: Mapping[str, FieldGetter] = allowed if isinstance(allowed, Mapping) else {}
    terms: list[FieldTerm] = []
    try:
        for part in sorted(_split_terms(text)):
            if not part:
                continue
            split = _split_term(part)
            if split is None:
                raise _SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
            lhs, op, rhs = split
            terms.append(FieldTerm(lhs, "!=" if op == "!=" else "=", _unescape(rhs), getters.get(lhs)))
    except _SelectorError as e:
        raise errors.bad_request(str(e)) from None
    extra = allowed or ()
    for t in terms:
        if t.field in _META_FIELDS or t.field in extra:
            continue
        if extra or not builtin:
            raise errors.bad_request(f"field label not supported: {t.field}")
        raise errors.bad_request(
            f'"{t.field}" is not a known field selector: only "metadata.name", "metadata.namespace"'
        )
    return FieldSelector(terms)
