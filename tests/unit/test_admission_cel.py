"""CEL for admission policies: the compiled closures (celfast) agree with cel-python's interpreter,
and kube's CEL behaviours that cel-python lacks (null equality, string/list extensions) hold."""

from __future__ import annotations

from typing import Any

import pytest

from isthmus.apiserver.admission.policy.cel import (
    CompileError,
    EvalError,
    LazyMap,
    Program,
    compile_expression,
    to_cel,
)

ROOTS = ["object", "oldObject", "request", "params", "namespaceObject", "variables"]

OBJECT = {"metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web", "tier": "front"}},
          "spec": {"replicas": 3, "ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}],
                   "ratio": 0.5, "flag": True, "empty": [], "nothing": None}}
REQUEST = {"operation": "UPDATE", "namespace": "ns",
           "userInfo": {"username": "system:serviceaccount:ns:cluster-a", "groups": ["g1", "g2"]}}

CORPUS = [
    "object.metadata.name", "object.spec.replicas + 1", "object.spec.replicas * 2 - 1 == 5",
    "object.spec.replicas / 2", "object.spec.replicas % 2", "object.spec.replicas / 0", "-object.spec.replicas",
    "object.spec.ratio * 2.0", "!object.spec.flag", "object.spec.flag && true", "object.spec.flag || false",
    "has(object.metadata.labels)", "has(object.spec.missing)", "has(object.metadata.labels.app)",
    "'app' in object.metadata.labels", "'x' in object.metadata.labels", "80 in object.spec.ports.map(p, p.port)",
    "object.metadata.labels['app']", "object.metadata.labels['missing']", "object.spec.missing",
    "object.spec.ports[1].name", "object.spec.ports[5]", "object.spec.ports.size()", "size(object.spec.ports)",
    "size(object.metadata.name)", "object.metadata.name.startsWith('we')", "object.metadata.name.endsWith('b')",
    "object.metadata.name.contains('e')", "object.metadata.name.matches('^w.b$')", "'a' + 'b' + object.metadata.name",
    "object.spec.replicas > 2 ? 'big' : 'small'", "object.spec.missing ? 1 : 2", "object.spec.flag ? 1 : object.x",
    "oldObject == null", "object != null", "null == null", "object.spec.nothing == null",
    "object.spec.ports.all(p, p.port > 0)", "object.spec.ports.all(p, p.port > 100)",
    "object.spec.ports.exists(p, p.name == 'https')", "object.spec.ports.exists_one(p, p.port == 80)",
    "object.spec.ports.filter(p, p.port > 100).map(p, p.name)",
    "object.spec.empty.all(x, x > 0)", "object.spec.empty.exists(x, x > 0)", "[1, 2, 3].map(x, x * x)",
    "{'a': 1, 'b': 2}['b']", "{'a': 1}.size()", "[1, 2] + [3]", "[1, 'a'] == [1, 'a']",
    "object.spec.ports.exists(p, p.missing == 1)", "object.spec.ports.exists(p, p.port == 80 || p.missing == 1)",
    "false && object.missing", "object.missing && false", "true || object.missing", "object.missing || true",
    "object.missing || false", "object.missing && true",
    "request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace + ':cluster-')",
    "'g2' in request.userInfo.groups", "request.operation != 'UPDATE' || oldObject.metadata.name == 'x'",
    "int('42') + 1", "string(object.spec.replicas)", "double(object.spec.replicas)", "uint(3) + 4u",
    "b'abc' == b'abc'", "'\\u00e9' == 'é'", "r'a\\b'", "1 < 2 && 2 <= 2 && 3 > 2 && 3 >= 3", "1.5 < 2.5",
    "object.metadata.name.lowerAscii()", "'A,B'.split(',').join('-')", "[3, 1, 2].isSorted()", "[1, 2, 3].sum()",
    "[4, 2, 9].min()", "[4, 2, 9].max()", "'hello'.indexOf('l')", "'hello'.substring(1, 3)",
    "'  x '.trim()", "'aaa'.replace('a', 'b')", "dyn(object.spec.replicas) == 3", "variables.n + 1",
    "variables.bad", "false && variables.bad", "variables.bad || true", "params == null",
    # strings joined and compared (celfast's direct route), and the mixed cases left to celpy's overloads
    "object.metadata.name == 'web'", "object.metadata.name != 'web'", "'x' + 'y' == 'xy'",
    "'a' + object.spec.replicas", "object.metadata.name == object.spec.replicas", "object.metadata.name != null",
    "'system:serviceaccount:' + request.namespace + ':cluster-' + object.metadata.labels['tier'] == "
    "request.userInfo.username",
]


def _outcome(p: Program, act: dict[str, Any], fast: bool) -> Any:
    runner = Program(p.expression, p._runner, p._fast if fast else None)
    try:
        return ("value", runner.evaluate(act))
    except EvalError as e:
        return ("error", str(e))


def _activation() -> dict[str, Any]:
    from celpy.evaluation import CELEvalError

    act = {"object": to_cel(OBJECT), "oldObject": to_cel(None), "request": to_cel(REQUEST),
           "params": to_cel(None), "namespaceObject": to_cel(None)}
    act["variables"] = LazyMap({"n": lambda: to_cel(41),
                                "bad": lambda: CELEvalError('composited variable "bad" fails', EvalError, None)})
    return act


@pytest.mark.parametrize("expression", CORPUS)
def test_compiled_closures_agree_with_the_interpreter(expression: str) -> None:
    p = compile_expression(expression, ROOTS, ["n", "bad"])
    assert p._fast is not None, "celfast compiles every expression of the corpus"
    fast, slow = _outcome(p, _activation(), True), _outcome(p, _activation(), False)
    # The same value, or both an error (celfast words some errors as cel-go does, celpy does not)
    assert fast[0] == slow[0] and (fast[0] == "error" or fast == slow), (fast, slow)


@pytest.mark.parametrize(("expression", "expected"), [
    ("object != null", True), ("oldObject == null", True), ("object.metadata.labels['missing']", "no such key: missing"),
    ("object.spec.missing", "no such key: missing"), ("false && object.missing", False),
    ("object.missing || true", True), ("object.metadata.name.lowerAscii() == 'web'", True),
    ("object.spec.ports.map(p, p.port)", [80, 443]), ("'A,B'.split(',').join('-')", "A-B"),
    ("object.spec.ports.map(p, p.port > 100, p.name)", ["https"]), ("object.spec.ports[5]", "index out of bounds: 5"),
    ("object.spec.missing ? 1 : 2", "no such key: missing"),
    ("'abc 123 def 45'.find('[0-9]+')", "123"), ("'abc 123 def 45'.findAll('[0-9]+')", ["123", "45"]),
    ("'a1b2c3'.findAll('[0-9]', 2)", ["1", "2"]),
])
def test_kube_cel_behaviour(expression: str, expected: Any) -> None:
    p = compile_expression(expression, ROOTS)
    outcome = _outcome(p, _activation(), True)
    is_error = isinstance(expected, str) and (expected.startswith("no such") or expected.startswith("index"))
    assert outcome == (("error", expected) if is_error else ("value", expected))


@pytest.mark.parametrize(("expression", "needle"), [
    ("object.metadata.name ==", "Syntax error"), ("obj.name", "undeclared reference to 'obj'"),
    ("object.name.nosuchfunction()", "undeclared reference to 'nosuchfunction'"),
    ("variables.undeclared", "undefined field 'undeclared'"), ("", "Syntax error"),
])
def test_compile_errors(expression: str, needle: str) -> None:
    with pytest.raises(CompileError) as e:
        compile_expression(expression, ROOTS, [])
    assert needle in str(e.value) and str(e.value).startswith("ERROR: <input>:")


LAZY_CORPUS = [
    "object == oldObject", "object.metadata == oldObject.metadata", "object.spec != oldObject.spec",
    "object.metadata.labels == {'app': 'web', 'tier': 'front'}", "object.metadata.labels.size()",
    "size(object.spec)", "object.metadata.labels.all(k, k != '')", "object.spec.ports.map(p, p.port)",
    "object.spec.ports[0] == {'port': 80, 'name': 'http'}", "'spec' in object", "has(object.spec.ratio)",
    "object.metadata.labels.exists(k, object.metadata.labels[k] == 'front')", "object.spec.nothing == null",
]


@pytest.mark.parametrize("expression", LAZY_CORPUS)
@pytest.mark.parametrize("fast", [True, False])
def test_objects_converted_lazily_answer_as_converted_eagerly(expression: str, fast: bool) -> None:
    from celpy.adapter import json_to_cel

    p = compile_expression(expression, ROOTS)
    lazy = {**_activation(), "oldObject": to_cel(OBJECT)}
    eager = {**lazy, "object": json_to_cel(OBJECT), "oldObject": json_to_cel(OBJECT)}
    assert _outcome(p, lazy, fast) == _outcome(p, eager, fast)


def test_only_what_an_expression_reads_is_converted() -> None:
    obj = to_cel(OBJECT)
    p = compile_expression("object.metadata.labels['app'] == 'web'", ROOTS)
    assert bool(p.evaluate({**_activation(), "object": obj}))
    assert dict.__getitem__(obj, "spec") is OBJECT["spec"]  # never read: still the JSON it was given
    assert dict.__getitem__(obj, "metadata") is not OBJECT["metadata"]
