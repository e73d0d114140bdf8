"""A closure compiler for cel-python's parse trees: the same CEL semantics, ~10x faster.

cel-python interprets its lark tree node by node on every evaluation (several ms for the
broker's policy). Admission evaluates the same few expressions on every write, so they are
turned once into nested Python closures over celpy's own types and functions. Anything this
compiler does not know (message construction, leading-dot names) raises Unsupported, and the
expression runs on celpy's interpreter instead.

Errors are values, as in CEL (celpy's CELEvalError): they propagate through operators and calls,
and `&&`, `||` and the ternary absorb them as CEL says (false && error is false).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions, boolean, operator_in

Ctx = Mapping[str, Any]
Fn = Callable[[Ctx], Any]


class Unsupported(Exception):
    """A construct left to celpy's interpreter."""


class StringKeyed(celtypes.MapType):
    """A CEL map whose keys are all strings (a JSON object's): `in` is a hash lookup."""


def _err(message: str, exc: type[BaseException] = TypeError, args: Any = None) -> CELEvalError:
    return CELEvalError(message, exc, args)


def _is_err(v: Any) -> bool:
    return isinstance(v, CELEvalError)


def _call(func: Callable[..., Any], args: list[Any]) -> Any:
    for a in args:
        if _is_err(a):
            return a
    try:
        return func(*args)
    except CELEvalError as e:
        return e
    except ZeroDivisionError as e:
        return _err("modulus or divide by zero", ZeroDivisionError, e.args)
    except KeyError as e:
        return _err("no such key", KeyError, e.args)
    except (TypeError, ValueError, IndexError, AttributeError, OverflowError) as e:
        return _err("no such overload" if isinstance(e, TypeError) else str(e), type(e), e.args)


def _select(target: Any, name: celtypes.StringType) -> Any:
    if _is_err(target):
        return target
    if isinstance(target, celtypes.MapType):
        try:
            return target[name]
        except KeyError:
            return _err("no such key", KeyError, (str(name),))
    return _err(f"type '{type(target).__name__}' does not support field selection")


def _index(target: Any, key: Any) -> Any:
    if _is_err(target):
        return target
    if _is_err(key):
        return key
    if isinstance(target, celtypes.MapType):
        try:
            return target[key]
        except KeyError:
            return _err("no such key", KeyError, (key,))
    if isinstance(target, celtypes.ListType) and isinstance(key, int) and not isinstance(key, bool):
        if 0 <= key < len(target):
            return target[key]
        return _err(f"index out of bounds: {key}", IndexError)
    return _err("no such overload")


def _bool(v: Any) -> bool | None:
    return bool(v) if isinstance(v, celtypes.BoolType) else None


_BINARY = {
    "relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_", "relation_ge": "_>=_",
    "relation_eq": "_==_", "relation_ne": "_!=_",
    "addition_add": "_+_", "addition_sub": "_-_",
    "multiplication_mul": "_*_", "multiplication_div": "_/_", "multiplication_mod": "_%_",
}


_ON_STRINGS: dict[str, Callable[[str, str], Any]] = {
    "_+_": operator.add,  # celpy's concatenation answers a plain str too
    "_==_": lambda a, b: celtypes.BoolType(a == b),
    "_!=_": lambda a, b: celtypes.BoolType(a != b),
}


class Compiler:
    """Compile a celpy parse tree (lark.Tree) into a function of the activation."""

    def __init__(self, functions: Mapping[str, Callable[..., Any]], literal: Callable[[lark.Tree[Any]], Any]) -> None:
        # celpy's comparison functions wrap their operator anew (functools.wraps) on every call: the
        # same wrappers, made once.
        relations = {name: boolean(op) for name, op in (("_<_", operator.lt), ("_<=_", operator.le),
                                                         ("_>_", operator.gt), ("_>=_", operator.ge),
                                                         ("_==_", operator.eq), ("_!=_", operator.ne))}
        self.functions = {**base_functions, **relations, **functions}
        self.literal = literal  # celpy's own literal parsing, run once per literal

    def compile(self, tree: lark.Tree[Any]) -> Fn:
        method = getattr(self, "_" + str(tree.data), None)
        if method is None:
            raise Unsupported(str(tree.data))
        fn: Fn = method(tree)
        return fn

    def _children(self, tree: lark.Tree[Any]) -> list[Any]:
        return list(tree.children)

    # ----------------------------------------------------------------- operators

    def _expr(self, tree: lark.Tree[Any]) -> Fn:
        ch = self._children(tree)
        if len(ch) == 1:
            return self.compile(ch[0])
        cond, yes, no = (self.compile(c) for c in ch)

        def ternary(ctx: Ctx) -> Any:
            c = cond(ctx)
            b = _bool(c)
            if b is None:
                return c if _is_err(c) else _err("no such overload")
            return yes(ctx) if b else no(ctx)
        return ternary

    def _logical(self, tree: lark.Tree[Any], is_and: bool) -> Fn:
        ch = self._children(tree)
        if len(ch) == 1:
            return self.compile(ch[0])
        left, right = self.compile(ch[0]), self.compile(ch[1])
        stop = not is_and  # the value that decides alone: false for &&, true for ||

        def logical(ctx: Ctx) -> Any:
            lv = left(ctx)
            lb = _bool(lv)
            if lb is stop:
                return lv
            rv = right(ctx)
            rb = _bool(rv)
            if rb is stop:
                return rv
            if lb is not None and rb is not None:
                return celtypes.BoolType(not stop)
            bad = lv if lb is None else rv
            return bad if _is_err(bad) else _err("no such overload")
        return logical

    def _conditionalor(self, tree: lark.Tree[Any]) -> Fn:
        return self._logical(tree, is_and=False)

    def _conditionaland(self, tree: lark.Tree[Any]) -> Fn:
        return self._logical(tree, is_and=True)

    def _binary_chain(self, tree: lark.Tree[Any]) -> Fn:
        ch = self._children(tree)
        if len(ch) == 1:
            return self.compile(ch[0])
        op_node, right_node = ch
        left = self.compile(op_node.children[0])
        right = self.compile(right_node)
        if op_node.data == "relation_in":
            def member_in(ctx: Ctx) -> Any:
                item, container = left(ctx), right(ctx)
                if isinstance(item, str) and isinstance(container, StringKeyed):
                    # a JSON object: its keys are all strings, and a string equals only a string,
                    # so celpy's key-by-key comparison comes to the hash lookup
                    return celtypes.BoolType(item in container)
                return _call(operator_in, [item, container])
            return member_in
        name = _BINARY[str(op_node.data)]
        func = self.functions[name]
        on_strings = _ON_STRINGS.get(name)
        if on_strings is not None:
            # Two strings (policies join and compare names): the answer celpy's overloads give, without
            # their dispatch.
            def binary_str(ctx: Ctx) -> Any:
                lv, rv = left(ctx), right(ctx)
                if isinstance(lv, str) and isinstance(rv, str):
                    return on_strings(lv, rv)
                return _call(func, [lv, rv])
            return binary_str

        def binary(ctx: Ctx) -> Any:
            return _call(func, [left(ctx), right(ctx)])
        return binary

    _relation = _binary_chain
    _addition = _binary_chain
    _multiplication = _binary_chain

    def _unary(self, tree: lark.Tree[Any]) -> Fn:
        ch = self._children(tree)
        if len(ch) == 1:
            return self.compile(ch[0])
        op, operand_node = ch
        operand = self.compile(operand_node)
        func = self.functions["!_"] if op.data == "unary_not" else operator.neg

        def unary(ctx: Ctx) -> Any:
            return _call(func, [operand(ctx)])
        return unary

    # ----------------------------------------------------------------- members

    def _member(self, tree: lark.Tree[Any]) -> Fn:
        return self.compile(tree.children[0])

    def _primary(self, tree: lark.Tree[Any]) -> Fn:
        return self.compile(tree.children[0])

    def _paren_expr(self, tree: lark.Tree[Any]) -> Fn:
        return self.compile(tree.children[0])

    def _member_dot(self, tree: lark.Tree[Any]) -> Fn:
        target, name = self.compile(tree.children[0]), celtypes.StringType(str(tree.children[1]))

        def select(ctx: Ctx) -> Any:
            t = target(ctx)
            if isinstance(t, celtypes.MapType):  # _select's common case, inlined
                try:
                    return t[name]
                except KeyError:
                    return _err("no such key", KeyError, (str(name),))
            return _select(t, name)
        return select

    def _member_index(self, tree: lark.Tree[Any]) -> Fn:
        target, key = self.compile(tree.children[0]), self.compile(tree.children[1])

        def index(ctx: Ctx) -> Any:
            return _index(target(ctx), key(ctx))
        return index

    def _args(self, tree: lark.Tree[Any] | None) -> list[Fn]:
        return [self.compile(c) for c in tree.children] if tree is not None else []

    def _member_dot_arg(self, tree: lark.Tree[Any]) -> Fn:
        target = self.compile(tree.children[0])
        name = str(tree.children[1])
        exprlist = tree.children[2] if len(tree.children) > 2 else None
        if name in ("all", "exists", "exists_one", "map", "filter"):
            return self._macro(name, target, exprlist)
        func = self.functions.get(name)
        if func is None:
            raise Unsupported(name)
        args = self._args(exprlist)

        def method(ctx: Ctx) -> Any:
            return _call(func, [target(ctx), *(a(ctx) for a in args)])
        return method

    def _macro(self, name: str, target: Fn, exprlist: lark.Tree[Any] | None) -> Fn:
        items = list(exprlist.children) if exprlist is not None else []
        if len(items) < 2:
            raise Unsupported(name)
        var = self._ident_name(items[0])
        body = [self.compile(i) for i in items[1:]]

        def elements(ctx: Ctx) -> Any:
            t = target(ctx)
            if _is_err(t):
                return t
            if isinstance(t, (celtypes.ListType, celtypes.MapType)):
                return list(t)
            return _err("no such overload")

        def bind(ctx: Ctx, v: Any) -> dict[str, Any]:
            inner = dict(ctx)
            inner[var] = v
            return inner

        if name in ("all", "exists"):
            want = name == "exists"  # the value that decides

            def quantifier(ctx: Ctx) -> Any:
                els = elements(ctx)
                if _is_err(els):
                    return els
                error = None
                for v in els:
                    r = body[0](bind(ctx, v))
                    b = _bool(r)
                    if b is want:
                        return celtypes.BoolType(want)
                    if b is None:
                        error = r if _is_err(r) else _err("no such overload")
                return error if error is not None else celtypes.BoolType(not want)
            return quantifier
        if name == "exists_one":
            def exists_one(ctx: Ctx) -> Any:
                els = elements(ctx)
                if _is_err(els):
                    return els
                count = 0
                for v in els:
                    r = body[0](bind(ctx, v))
                    b = _bool(r)
                    if b is None:
                        return r if _is_err(r) else _err("no such overload")
                    count += b
                return celtypes.BoolType(count == 1)
            return exists_one
        if name == "filter" or (name == "map" and len(body) == 2):
            pred, transform = body[0], (body[1] if name == "map" else None)

            def filtered(ctx: Ctx) -> Any:
                els = elements(ctx)
                if _is_err(els):
                    return els
                out = []
                for v in els:
                    inner = bind(ctx, v)
                    r = pred(inner)
                    b = _bool(r)
                    if b is None:
                        return r if _is_err(r) else _err("no such overload")
                    if b:
                        value = transform(inner) if transform is not None else v
                        if _is_err(value):
                            return value
                        out.append(value)
                return celtypes.ListType(out)
            return filtered
        if name == "map" and len(body) == 1:
            transform1 = body[0]

            def mapped(ctx: Ctx) -> Any:
                els = elements(ctx)
                if _is_err(els):
                    return els
                out = []
                for v in els:
                    value = transform1(bind(ctx, v))
                    if _is_err(value):
                        return value
                    out.append(value)
                return celtypes.ListType(out)
            return mapped
        raise Unsupported(name)

    @staticmethod
    def _ident_name(node: Any) -> str:
        """The variable a macro binds (its first argument must be a bare identifier)."""
        if isinstance(node, lark.Tree):
            tokens = [t for t in node.scan_values(lambda v: isinstance(v, lark.Token))]
            idents = [n for n in node.iter_subtrees() if n.data == "ident"]
            if len(tokens) == 1 and len(idents) == 1:
                return str(tokens[0])
        raise Unsupported("macro variable")

    def _ident(self, tree: lark.Tree[Any]) -> Fn:
        name = str(tree.children[0])

        def ident(ctx: Ctx) -> Any:
            try:
                return ctx[name]
            except KeyError:
                return _err(f"undeclared reference to '{name}' (in container '')", NameError)
        return ident

    def _ident_arg(self, tree: lark.Tree[Any]) -> Fn:
        name = str(tree.children[0])
        exprlist = tree.children[1] if len(tree.children) > 1 else None
        if name == "has":
            return self._has(exprlist)
        func = self.functions.get(name)
        if func is None:
            raise Unsupported(name)
        args = self._args(exprlist)

        def call(ctx: Ctx) -> Any:
            return _call(func, [a(ctx) for a in args])
        return call

    def _has(self, exprlist: lark.Tree[Any] | None) -> Fn:
        # has(e.f): the argument must be a field selection
        node: Any = exprlist.children[0] if exprlist is not None and len(exprlist.children) == 1 else None
        while isinstance(node, lark.Tree) and node.data != "member_dot" and len(node.children) == 1:
            node = node.children[0]
        if not (isinstance(node, lark.Tree) and node.data == "member_dot"):
            raise Unsupported("has")
        target, name = self.compile(node.children[0]), celtypes.StringType(str(node.children[1]))

        def has(ctx: Ctx) -> Any:
            t = target(ctx)
            if _is_err(t):
                return t
            if isinstance(t, celtypes.MapType):
                return celtypes.BoolType(name in t)
            return _err("no such overload")
        return has

    # ----------------------------------------------------------------- literals

    def _literal(self, tree: lark.Tree[Any]) -> Fn:
        value = self.literal(tree)
        if _is_err(value):
            raise Unsupported("literal")

        def literal(ctx: Ctx) -> Any:
            return value
        return literal

    def _list_lit(self, tree: lark.Tree[Any]) -> Fn:
        items = self._args(tree.children[0] if tree.children else None)

        def list_lit(ctx: Ctx) -> Any:
            values = [i(ctx) for i in items]
            for v in values:
                if _is_err(v):
                    return v
            return celtypes.ListType(values)
        return list_lit

    def _map_lit(self, tree: lark.Tree[Any]) -> Fn:
        inits = [self.compile(c) for c in tree.children[0].children] if tree.children else []
        pairs = list(zip(inits[::2], inits[1::2], strict=True))

        def map_lit(ctx: Ctx) -> Any:
            out = {}
            for k, v in pairs:
                key, value = k(ctx), v(ctx)
                if _is_err(key):
                    return key
                if _is_err(value):
                    return value
                out[key] = value
            return celtypes.MapType(out)
        return map_lit
