"""kube's value validators (k8s.io/apimachinery/pkg/util/validation) and field errors (its field package).

Each `is_*` returns the messages kube's function of the same name returns, in its words, so
that a 422 here reads as one from a real cluster. Every regular expression is matched against
the whole value (`fullmatch`): Go's `^...$` anchors the whole string, where Python's `$` would
also match before a trailing newline and let "name\\n" through.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from isthmus.apiserver.apimachinery.errors import cause, go_quote

Cause = dict[str, str]

DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT: Final = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
DNS1035_LABEL_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
WILDCARD_DNS1123_SUBDOMAIN_FMT: Final = "\\*\\." + DNS1123_SUBDOMAIN_FMT
QUALIFIED_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT: Final = f"({QUALIFIED_NAME_FMT})?"

_DNS1123_LABEL: Final = re.compile(DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN: Final = re.compile(DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL: Final = re.compile(DNS1035_LABEL_FMT)
_WILDCARD_DNS1123_SUBDOMAIN: Final = re.compile(WILDCARD_DNS1123_SUBDOMAIN_FMT)
_QUALIFIED_NAME: Final = re.compile(QUALIFIED_NAME_FMT)
_LABEL_VALUE: Final = re.compile(LABEL_VALUE_FMT)
_PORT_NAME_CHARSET: Final = re.compile("[-a-z0-9]+")

DNS1123_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character"
)
DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character"
)
DNS1035_LABEL_MSG: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character"
)
WILDCARD_DNS1123_SUBDOMAIN_MSG: Final = (
    "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist "
    "of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character"
)
QUALIFIED_NAME_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character"
)


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """Go's validation.RegexError, its double spaces included."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    return msg + " (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"


def max_len_error(n: int) -> str:
    return f"must be no more than {n} characters"


def is_dns1123_label(value: str) -> list[str]:
    errs = [max_len_error(63)] if len(value) > 63 else []
    if not _DNS1123_LABEL.fullmatch(value):
        errs.append(regex_error(DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = [max_len_error(253)] if len(value) > 253 else []
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errs.append(regex_error(DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = [max_len_error(63)] if len(value) > 63 else []
    if not _DNS1035_LABEL.fullmatch(value):
        errs.append(regex_error(DNS1035_LABEL_MSG, DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def is_wildcard_dns1123_subdomain(value: str) -> list[str]:
    errs = [max_len_error(253)] if len(value) > 253 else []
    if not _WILDCARD_DNS1123_SUBDOMAIN.fullmatch(value):
        errs.append(regex_error(WILDCARD_DNS1123_SUBDOMAIN_MSG, WILDCARD_DNS1123_SUBDOMAIN_FMT, "*.example.com"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """A label or annotation key: an optional DNS-subdomain prefix and '/', then a name part."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in is_dns1123_subdomain(prefix)]
    else:
        return [
            "a qualified name " + regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + max_len_error(63))
    if not _QUALIFIED_NAME.fullmatch(name):
        errs.append("name part " + regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_valid_label_value(value: str) -> list[str]:
    errs = [max_len_error(63)] if len(value) > 63 else []
    if not _LABEL_VALUE.fullmatch(value):
        errs.append(regex_error(LABEL_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def is_valid_port_name(port: str) -> list[str]:
    """An IANA_SVC_NAME: at most 15 characters, a-z, 0-9 and single inner hyphens, one letter at least."""
    errs = [max_len_error(15)] if len(port) > 15 else []
    if not _PORT_NAME_CHARSET.fullmatch(port):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not any("a" <= c <= "z" for c in port):
        errs.append("must contain at least one letter (a-z)")
    if "--" in port:
        errs.append("must not contain consecutive hyphens")
    if port and (port[0] == "-" or port[-1] == "-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def is_valid_port_num(port: int) -> list[str]:
    return [] if 1 <= port <= 65535 else ["must be between 1 and 65535, inclusive"]


def is_path_segment_name(name: str) -> list[str]:
    """content.IsPathSegmentName: what may not appear in one segment of a URL path."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def mask_trailing_dash(name: str) -> str:
    """What a generateName prefix is checked as: its trailing '-' stands before the random suffix."""
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


# ---------------------------------------------------------------- field errors (k8s.io/.../validation/field)


def go_value(value: Any) -> str:
    """How field.Error prints a bad value: strings quoted as Go's %q, numbers and booleans plain."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return "null"
    return go_quote(str(value))


def invalid(field: str, value: Any, detail: str) -> Cause:
    return cause(field, f"Invalid value: {go_value(value)}: {detail}")


def invalid_each(field: str, value: str, msgs: Iterable[str]) -> list[Cause]:
    return [invalid(field, value, m) for m in msgs]


def required(field: str, detail: str = "") -> Cause:
    return cause(field, "Required value" + (f": {detail}" if detail else ""), "FieldValueRequired")


def not_supported(field: str, value: Any, supported: Iterable[str]) -> Cause:
    values = ", ".join(go_quote(s) for s in supported)
    return cause(field, f"Unsupported value: {go_value(value)}: supported values: {values}", "FieldValueNotSupported")


def forbidden(field: str, detail: str) -> Cause:
    return cause(field, f"Forbidden: {detail}", "FieldValueForbidden")
