"""CEL for admission policies: compile (with the checks kube's type checker would refuse), evaluate.

Evaluation runs celfast's closures (the same semantics, compiled once) and falls back to celpy's
interpreter for what those do not cover.

The engine is cel-python (`celpy`, pure Python). It parses but does not type-check, so compiling
here adds what matters for a policy author: references to variables the environment does not
declare (`undeclared reference to 'x'`), to functions it does not know, and to `variables.<name>`
not declared before. What cel-python lacks of kube's CEL is added as functions: null equality
with any value (`object != null`), and the string and list extensions policies use most
(lowerAscii, split, join, ...). Errors are worded as cel-go words them where it is cheap to.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, base_functions, boolean

from isthmus.apiserver.admission.policy.celfast import Compiler, StringKeyed

# celpy's StringType defines __eq__, __ne__ and __hash__ in Python, each only calling str's: every
# map lookup by a CEL string key paid a Python call for the hash and another for the comparison
# (about a third of an admission policy's evaluation). str's own slots give the same answers.
celtypes.StringType.__hash__ = str.__hash__  # type: ignore[method-assign]
celtypes.StringType.__eq__ = str.__eq__  # type: ignore[method-assign]
celtypes.StringType.__ne__ = str.__ne__  # type: ignore[method-assign]
_new_str = str.__new__
_String = celtypes.StringType

__all__ = ["CompileError", "EvalError", "LazyMap", "Program", "compile_expression", "to_cel"]

MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})
_BINDING_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


class CompileError(Exception):
    """The expression does not compile; str() is cel-go's `ERROR: <input>:l:c: ...` text."""


class EvalError(Exception):
    """Evaluation failed; str() is the error as cel-go reports it (e.g. `no such key: x`)."""


def _is_null(v: Any) -> bool:
    return v is None or isinstance(v, celtypes.NullType)


# celpy's bool_eq wraps operator.eq anew (functools.wraps included) on every comparison.
_bool_eq = boolean(operator.eq)


def _eq(a: Any, b: Any) -> Any:
    # CEL's heterogeneous equality: null equals only null (cel-python has no overload for it).
    if _is_null(a) or _is_null(b):
        return celtypes.BoolType(_is_null(a) and _is_null(b))
    return _bool_eq(a, b)


def _ne(a: Any, b: Any) -> Any:
    r = _eq(a, b)
    return r if isinstance(r, CELEvalError) else celtypes.BoolType(not r)


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"no such overload: {type(v).__name__}")
    return v


def _index_of(target: Any, item: Any, *start: Any) -> celtypes.IntType:
    if isinstance(target, str):
        return celtypes.IntType(_str(target).find(_str(item), int(start[0]) if start else 0))
    items = list(target)
    for i, v in enumerate(items):
        if _eq(v, item):
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def _last_index_of(target: Any, item: Any) -> celtypes.IntType:
    if isinstance(target, str):
        return celtypes.IntType(_str(target).rfind(_str(item)))
    items = list(target)
    for i in range(len(items) - 1, -1, -1):
        if _eq(items[i], item):
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def _substring(s: Any, start: Any, *end: Any) -> celtypes.StringType:
    text = _str(s)
    b, e = int(start), int(end[0]) if end else len(text)
    if not 0 <= b <= e <= len(text):
        raise IndexError(f"index out of range: {e if e > len(text) else b}")
    return celtypes.StringType(text[b:e])


def _split(s: Any, sep: Any, *limit: Any) -> celtypes.ListType:
    parts = _str(s).split(_str(sep), int(limit[0]) - 1) if limit and int(limit[0]) > 0 else _str(s).split(_str(sep))
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _join(items: Any, *sep: Any) -> celtypes.StringType:
    return celtypes.StringType((_str(sep[0]) if sep else "").join(_str(i) for i in items))


def _sum(items: list[Any]) -> Any:
    total: Any = celtypes.IntType(0)
    for i, v in enumerate(items):
        total = v if i == 0 else total + v
    return total


def _numbers(items: Any) -> list[Any]:
    values = list(items)
    if not values:
        raise ValueError("min called on empty list")
    return values


EXTENSIONS: dict[str, Callable[..., Any]] = {
    "_==_": _eq,
    "_!=_": _ne,
    # kube's strings library (cel-go ext.Strings)
    "lowerAscii": lambda s: celtypes.StringType(_str(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(_str(s).upper()),
    "trim": lambda s: celtypes.StringType(_str(s).strip()),
    "replace": lambda s, old, new, *n: celtypes.StringType(
        _str(s).replace(_str(old), _str(new), *(int(x) for x in n))),
    "split": _split,
    "join": _join,
    "substring": _substring,
    "charAt": lambda s, i: celtypes.StringType(_str(s)[int(i)] if int(i) < len(_str(s)) else ""),
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    # kube's regex library (Python's re for RE2: the same for the patterns policies use)
    "find": lambda s, pattern: celtypes.StringType(m.group(0) if (m := re.search(_str(pattern), _str(s))) else ""),
    "findAll": lambda s, pattern, *n: celtypes.ListType(
        [celtypes.StringType(m.group(0)) for m in re.finditer(_str(pattern), _str(s))][:int(n[0]) if n and int(n[0]) >= 0
                                                                                        else None]),
    # kube's lists library
    "isSorted": lambda items: celtypes.BoolType(list(items) == sorted(items)),
    "sum": lambda items: _sum(list(items)),
    "min": lambda items: min(_numbers(items)),
    "max": lambda items: max(_numbers(items)),
    "dyn": lambda v: v,
}

KNOWN_FUNCTIONS = frozenset(base_functions) | frozenset(EXTENSIONS) | MACROS


def to_cel(value: Any) -> Any:
    """JSON data as CEL values (None → null); objects convert lazily (`LazyJsonMap`)."""
    if value is None:
        return celtypes.NullType()
    return _lazy_cel(value)


def _lazy_cel(value: Any) -> Any:
    if isinstance(value, dict):
        return LazyJsonMap(value)
    if isinstance(value, list | tuple):
        return celtypes.ListType([_lazy_cel(v) for v in value])
    return json_to_cel(value)


_KEYS: dict[str, Any] = {}
"""JSON keys as CEL strings, made once: objects repeat theirs (metadata, labels, name, ...)."""
_RAW = frozenset({dict, list, str, int, float, bool, type(None)})
"""The types of values JSON decodes to: such a value in a LazyJsonMap is not converted yet
(CEL's own types are subclasses, never these)."""


def _cel_key(key: str) -> Any:
    cel = _KEYS.get(key)
    if cel is None:
        if len(_KEYS) >= 8192:  # bounded: label keys are the user's
            _KEYS.clear()
        cel = _KEYS[key] = _new_str(_String, key)
    return cel


class LazyJsonMap(StringKeyed):
    """A JSON object as a CEL map whose values are converted when first read.

    A policy usually reads a few fields (`object.metadata.labels`), and converting the whole
    object and oldObject up front was about a tenth of a broker's CPU under the member-writes
    policy: an EndpointSlice's endpoints, managedFields and all. Keys are there from the start,
    so `in`, `has()`, `size()` and iteration answer without converting; bulk reads convert it all.
    """

    def __init__(self, raw: Mapping[str, Any]) -> None:
        # dict's own constructor, with keys made once for all requests (`_cel_key`)
        keys = _KEYS
        dict.__init__(self, {keys.get(k) or _cel_key(k): v for k, v in raw.items()})

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if type(value) in _RAW:
            value = _lazy_cel(value)
            dict.__setitem__(self, key, value)
        return value

    def get(self, key: Any, default: Any | None = None) -> Any:
        if key in self:
            return self[key]
        return super().get(key, default)

    def _convert_all(self) -> None:
        for key in list(dict.keys(self)):
            self[key]

    def values(self) -> Any:
        self._convert_all()
        return super().values()

    def items(self) -> Any:
        self._convert_all()
        return super().items()

    def __repr__(self) -> str:
        self._convert_all()
        return super().__repr__()


class LazyMap(celtypes.MapType):
    """`variables`: each evaluated when first read (kube's composition), then kept."""

    def __init__(self, thunks: Mapping[str, Callable[[], Any]]) -> None:
        super().__init__()
        self._thunks = {celtypes.StringType(k): v for k, v in thunks.items()}
        self._done: dict[Any, Any] = {}

    def __getitem__(self, key: Any) -> Any:
        if key in self._done:
            return self._done[key]
        thunk = self._thunks.get(key)
        if thunk is None:
            raise KeyError(key)
        value = self._done[key] = thunk()
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._thunks


_ENV = celpy.Environment()


@dataclass
class Program:
    expression: str
    _runner: Any  # celpy's interpreter
    _fast: Callable[[Mapping[str, Any]], Any] | None = None  # celfast's closures, when it compiles them
    names: frozenset[str] = frozenset()  # the identifiers it reads (object, request, variables, ...)

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        """The result as a CEL value; raises EvalError."""
        try:
            if self._fast is not None:
                result = self._fast(activation)
            else:
                result = self._runner.evaluate(dict(activation))
        except CELEvalError as e:
            raise EvalError(eval_error_text(e)) from None
        except Exception as e:  # an extension's TypeError/ValueError: an evaluation error too
            raise EvalError(str(e) or type(e).__name__) from None
        if isinstance(result, CELEvalError):
            raise EvalError(eval_error_text(result))
        return result


_NO_MEMBER = re.compile(r"no such member in mapping: '(.*)'$")


def eval_error_text(e: CELEvalError) -> str:
    """cel-go's wording of the common evaluation errors."""
    args = e.args
    message = str(args[0]) if args else "evaluation error"
    if len(args) >= 3 and args[1] is KeyError and args[2]:
        return f"no such key: {args[2][0]}"
    missing = _NO_MEMBER.match(message)
    if missing:
        return f"no such key: {missing.group(1)}"
    if message.startswith("found no matching overload"):
        return "no such overload"
    return message


def _located(text: str, line: int, column: int, message: str) -> str:
    """cel-go's error format: the position, the message, then the source line and a caret."""
    lines = text.split("\n")
    src = lines[line - 1] if 0 < line <= len(lines) else ""
    return f"ERROR: <input>:{line}:{column}: {message}\n | {src}\n | {'.' * (column - 1)}^"


def _token_at(tree: lark.Tree[Any]) -> lark.Token | None:
    for t in tree.scan_values(lambda v: isinstance(v, lark.Token)):
        return t  # type: ignore[no-any-return]
    return None


def _check(text: str, tree: lark.Tree[Any], roots: Iterable[str], variables: Iterable[str] | None) -> None:
    """What cel-go's checker would refuse and cel-python would only find when evaluating."""
    declared = set(roots)
    bound: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg" and len(node.children) == 3:
            method = node.children[1]
            if str(method) in _BINDING_MACROS and isinstance(node.children[2], lark.Tree):
                first = node.children[2].children[0] if node.children[2].children else None
                if isinstance(first, lark.Tree):
                    bound.update(str(t) for t in first.scan_values(lambda v: isinstance(v, lark.Token)))
    problems: list[tuple[int, int, str]] = []
    var_names = set(variables) if variables is not None else None
    for node in tree.iter_subtrees():
        if node.data == "ident" and node.children and isinstance(node.children[0], lark.Token):
            tok = node.children[0]
            name = str(tok)
            if name not in declared and name not in bound:
                problems.append((tok.line or 1, tok.column or 1,
                                 f"undeclared reference to '{name}' (in container '')"))
        elif node.data in ("ident_arg", "member_dot_arg") and node.children:
            fn = node.children[0] if node.data == "ident_arg" else node.children[1]
            if isinstance(fn, lark.Token) and str(fn) not in KNOWN_FUNCTIONS:
                problems.append((fn.line or 1, fn.column or 1,
                                 f"undeclared reference to '{fn}' (in container '')"))
        elif node.data == "member_dot" and var_names is not None and len(node.children) == 2:
            inner, field = node.children
            if isinstance(inner, lark.Tree) and inner.data == "member" and inner.children:
                prim = inner.children[0]
                if isinstance(prim, lark.Tree) and prim.data == "primary" and prim.children:
                    ident = prim.children[0]
                    if isinstance(ident, lark.Tree) and ident.data == "ident" and \
                            str(ident.children[0]) == "variables" and str(field) not in var_names:
                        at = field if isinstance(field, lark.Token) else _token_at(node)
                        line, col = (at.line or 1, at.column or 1) if at is not None else (1, 1)
                        problems.append((line, col, f"undefined field '{field}'"))
    if problems:
        raise CompileError("\n".join(_located(text, *p) for p in sorted(set(problems))))


def compile_expression(text: str, roots: Iterable[str], variables: Iterable[str] | None = None) -> Program:
    """Parse and check `text` for an environment declaring `roots` (and `variables.<name>` for
    each of `variables`, when given); raises CompileError."""
    if not text.strip():
        raise CompileError("ERROR: <input>:1:1: Syntax error: mismatched input '<EOF>'")
    try:
        tree = _ENV.compile(text)
    except CELParseError as e:
        line, col = getattr(e, "line", None) or 1, getattr(e, "column", None) or 1
        cause = e.__context__
        token = getattr(cause, "token", None)
        what = "'<EOF>'" if token is None or getattr(token, "type", "") == "$END" else f"'{token}'"
        raise CompileError(_located(text, line, col, f"Syntax error: mismatched input {what}")) from None
    _check(text, tree, roots, variables)
    try:
        fast: Callable[[Mapping[str, Any]], Any] | None = _COMPILER.compile(tree)
    except Exception:  # Unsupported, or a tree shape celfast does not expect: the interpreter runs it
        fast = None
    names = frozenset(str(node.children[0]) for node in tree.iter_subtrees()
                      if node.data == "ident" and node.children and isinstance(node.children[0], lark.Token))
    return Program(text, _ENV.program(tree, functions=EXTENSIONS), fast, names)


def _literal(tree: lark.Tree[Any]) -> Any:
    """A literal's value, parsed by celpy itself (escapes, bytes, uints as CEL has them)."""
    try:
        return _ENV.program(tree).evaluate({})
    except CELEvalError as e:
        return e


_COMPILER = Compiler(EXTENSIONS, _literal)
