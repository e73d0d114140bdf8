"""Label and field selectors: kube's syntax, semantics and error wording."""

from __future__ import annotations

from typing import Any

import pytest

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.apimachinery.selectors import parse_field_selector, parse_label_selector

LABELS = {"app": "web", "tier": "frontend", "example.com/team": "blue", "n": "5"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        (None, True),
        ("app=web", True),
        ("app==web", True),
        ("app = web", True),
        ("  app=web ,  tier = frontend ", True),
        ("app=db", False),
        ("app!=db", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("app in (web,db)", True),
        ("app in ( db , web )", True),
        ("app in (db)", False),
        ("app notin (db)", True),
        ("app notin (web, db)", False),
        ("missing notin (x)", True),
        ("missing in (x)", False),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("! missing", True),
        ("!app", False),
        ("example.com/team=blue", True),
        ("example.com/team in (red)", False),
        ("app=web,missing", False),
        ("app=web,!missing,tier in (frontend)", True),
        ("n>4", True),
        ("n<5", False),
        ("app>1", False),  # not an integer label value
        ("app=", False),
        ("missing in ()", False),
        ("in=web", False),  # "in" is an ordinary key where a key is expected
    ],
)
def test_label_matching(text: str | None, expected: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is expected


def test_label_empty_values_and_none_labels() -> None:
    assert parse_label_selector("a=").matches({"a": ""})
    assert parse_label_selector("a in (,x)").matches({"a": ""})
    assert parse_label_selector("a notin (x)").matches(None)
    assert not parse_label_selector("a").matches(None)
    assert parse_label_selector("").empty and not parse_label_selector("a").empty


def test_label_keywords_as_keys_and_values() -> None:
    assert parse_label_selector("in=notin").matches({"in": "notin"})
    assert parse_label_selector("a=in").matches({"a": "in"})
    assert parse_label_selector("a in (notin, in)").matches({"a": "notin"})


def bad(text: str) -> str:
    with pytest.raises(ApiError) as e:
        parse_label_selector(text)
    assert e.value.code == 400 and e.value.reason == "BadRequest"
    return e.value.message


def test_label_syntax_errors_use_kube_wording() -> None:
    assert bad("app=web tier=x") == "found 'tier', expected: ',' or 'end of string'"
    assert bad("app=web,") == "found '', expected: identifier after ','"
    assert bad("=web") == "found '=', expected: !, identifier, or 'end of string'"
    assert bad("app in web") == "unable to parse requirement: found 'web' expected: '('"
    assert bad("app in (web") == "unable to parse requirement: found '', expected: ',' or ')'"
    assert bad("app in (web db)") == "unable to parse requirement: found 'db', expected: ',' or ')'"
    assert (
        bad("app foo web")
        == "unable to parse requirement: found 'foo', expected: in, notin, =, ==, !=, gt, lt"
    )
    assert bad("app=(web)") == "unable to parse requirement: found '(', expected: identifier"
    assert bad("!app=web") == "found '=', expected: ',' or 'end of string'"


def test_label_key_and_value_validation() -> None:
    msg = bad("a$b=c")
    assert msg.startswith(
        'unable to parse requirement: <nil>: Invalid value: "a$b": name part must consist of'
    )
    assert "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'" in msg
    msg = bad("Example.com/x=y")
    assert 'Invalid value: "Example.com/x": prefix part a lowercase RFC 1123 subdomain' in msg
    assert "name part" in bad("example.com/=y")
    assert "a qualified name" in bad("a/b/c=d")
    assert "name part must be no more than 63 characters" in bad("k" * 64)
    msg = bad("app=-web")
    assert msg.startswith(
        'unable to parse requirement: values[0][app]: Invalid value: "-web": a valid label must'
    )
    assert "must be no more than 63 characters" in bad("app=" + "v" * 64)
    msg = bad("app in (ok, -x, _y)")
    assert msg.startswith('unable to parse requirement: [values[0][app]: Invalid value: "-x"')
    assert 'values[1][app]: Invalid value: "_y"' in msg
    assert bad("n>x") == (
        "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"
    )


# ----- field selectors --------------------------------------------------------------------

POD: dict[str, Any] = {
    "metadata": {"name": "web-1", "namespace": "prod"},
    "spec": {"nodeName": "n1", "hostNetwork": False, "replicas": 3},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        (None, True),
        ("metadata.name=web-1", True),
        ("metadata.name==web-1", True),
        ("metadata.name!=web-1", False),
        ("metadata.namespace=prod,metadata.name=web-1", True),
        ("metadata.namespace=prod,metadata.name=other", False),
        ("metadata.namespace!=default", True),
        ("spec.nodeName=n1", True),
        ("spec.hostNetwork=false", True),
        ("spec.replicas=3", True),
        ("status.phase!=Pending", True),
        ("status.podIP=", True),  # missing reads as ""
        ("status.podIP!=", False),
    ],
)
def test_field_matching(text: str | None, expected: bool) -> None:
    allowed = {"spec.nodeName", "spec.hostNetwork", "spec.replicas", "status.phase", "status.podIP"}
    assert parse_field_selector(text, allowed).matches(POD) is expected


def test_field_escaped_values() -> None:
    sel = parse_field_selector(r"metadata.name=a\,b\=c\\d")
    assert sel.matches({"metadata": {"name": "a,b=c\\d"}})
    assert sel.equals_value("metadata.name") == "a,b=c\\d"
    assert sel.equals_value("metadata.namespace") is None
    assert parse_field_selector("metadata.name!=x").equals_value("metadata.name") is None


def field_bad(text: str, allowed: set[str] | None = None, builtin: bool = True) -> str:
    with pytest.raises(ApiError) as e:
        parse_field_selector(text, allowed, builtin=builtin)
    assert e.value.code == 400
    return e.value.message


def test_field_errors_use_kube_wording() -> None:
    assert field_bad("foo.bar=baz") == (
        '"foo.bar" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )
    assert field_bad("spec.x=1", {"spec.nodeName"}) == "field label not supported: spec.x"
    assert field_bad("spec.x=1", builtin=False) == "field label not supported: spec.x"
    assert field_bad("metadata.name") == "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
    assert field_bad(r"metadata.name=a\x") == "invalid field selector: invalid escape sequence: \\x"
    assert field_bad("metadata.name=a\\") == "invalid field selector: invalid escape sequence: \\"
    assert field_bad("metadata.name=a=b") == "invalid field selector: unescaped character in value: 61"
    # Whitespace is not trimmed (kube neither): the field is then unknown.
    assert "is not a known field selector" in field_bad("metadata.name = x")


def test_field_empty_terms_are_ignored() -> None:
    sel = parse_field_selector("metadata.name=web-1,,")
    assert sel.matches(POD) and not sel.empty
    assert parse_field_selector(",").empty
