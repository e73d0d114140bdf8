"""Impersonation: a request acting as another user, as kube-apiserver's WithImpersonation filter does.

kube runs this filter after authentication and before authorization: the authenticated user
(the requestor) must be allowed the verb `impersonate` on each thing it asks to be, and the
request then goes on, authorization included, as the user it asked to be. What can be asked:

- `Impersonate-User: <name>`: resource `users` (group "", name <name>); a name of the form
  `system:serviceaccount:<ns>:<sa>` is a ServiceAccount instead: `serviceaccounts` in namespace
  <ns>, name <sa>, and (without Impersonate-Group) the ServiceAccount's fixed groups
  `system:serviceaccounts` and `system:serviceaccounts:<ns>`.
- `Impersonate-Group: <group>` (repeatable): `groups`, name <group>.
- `Impersonate-Uid: <uid>`: `uids` in `authentication.k8s.io`.
- `Impersonate-Extra-<key>: <value>` (repeatable): `userextras/<key>` in `authentication.k8s.io`,
  name <value>; the key is lowercased and percent-decoded (keys such as `example.com%2fscope`).

Users, groups and ServiceAccounts are checked in the core group "" because kube builds their
attributes from an ObjectReference without apiVersion; so kube's RBAC examples grant
`impersonate` on `users`/`groups`/`serviceaccounts` in `apiGroups: [""]`, and on `userextras/*`
and `uids` in `authentication.k8s.io`.

A group, extra or uid without a user is an error kube answers with a plain-text 500 (its filter
calls responsewriters.InternalError); a denied check is the authorization filter's 403 for the
impersonate attributes (`users "x" is forbidden: User "y" cannot impersonate resource "users" in
API group "" at the cluster scope`). An impersonated user other than `system:anonymous` gets
`system:authenticated` unless the requested groups already name it or `system:unauthenticated`;
`system:anonymous` gets `system:unauthenticated` likewise.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from isthmus.apiserver.authentication.authenticators import (
    ANONYMOUS_USER,
    AUTHENTICATED_GROUP,
    UNAUTHENTICATED_GROUP,
    UserInfo,
)
from isthmus.apiserver.authorization.attributes import Attributes, forbidden

__all__ = [
    "EXTRA_PREFIX",
    "GROUP_HEADER",
    "UID_HEADER",
    "USER_HEADER",
    "BadImpersonation",
    "impersonate",
    "requested",
]

USER_HEADER = "Impersonate-User"
GROUP_HEADER = "Impersonate-Group"
UID_HEADER = "Impersonate-Uid"
EXTRA_PREFIX = "Impersonate-Extra-"
_PREFIX = "impersonate-"
AUTHENTICATION_GROUP = "authentication.k8s.io"
SA_PREFIX = "system:serviceaccount:"
ALL_SA_GROUP = "system:serviceaccounts"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# (allowed, reason): what the server's authorizer chain says of one impersonate check.
Authorize = Callable[[Attributes], tuple[bool, str]]
Headers = Iterable[tuple[str, str]]


class BadImpersonation(Exception):
    """Impersonation headers kube refuses before any check (a plain-text 500, as kube answers)."""


@dataclass(frozen=True)
class _Ask:
    """One thing asked to be impersonated: kube's ObjectReference for it."""

    kind: str
    name: str
    namespace: str = ""
    api_version: str = ""
    field_path: str = ""

    def go(self) -> str:
        """Go's %v of the ObjectReference (Kind Namespace Name UID APIVersion ResourceVersion FieldPath)."""
        return "{" + " ".join((self.kind, self.namespace, self.name, "", self.api_version, "", self.field_path)) + "}"

    def attributes(self, requestor: UserInfo) -> Attributes:
        resource, subresource = _RESOURCES[self.kind], self.field_path
        group = AUTHENTICATION_GROUP if self.api_version else ""
        return Attributes(requestor, "impersonate", True, api_group=group, api_version=self.api_version.partition("/")[2],
                          resource=resource, subresource=subresource, namespace=self.namespace, name=self.name)


_RESOURCES = {"ServiceAccount": "serviceaccounts", "User": "users", "Group": "groups", "UserExtra": "userextras",
              "UID": "uids"}


def requested(headers: Iterable[str]) -> bool:
    """Whether a request's headers (their names) ask for impersonation at all: the one test every
    request pays: about 0.3 µs for a kubectl request's seven headers (first letters first; a
    generator with a lowercase of every name cost 2 µs)."""
    for k in headers:
        if k[:1] in "Ii" and k[:12].lower() == _PREFIX:
            return True
    return False


def split_service_account(username: str) -> tuple[str, str] | None:
    """serviceaccount.SplitUsername: (namespace, name) of `system:serviceaccount:<ns>:<name>`, else None."""
    if not username.startswith(SA_PREFIX):
        return None
    parts = username[len(SA_PREFIX):].split(":")
    if len(parts) != 2:
        return None
    ns, name = parts
    if not _DNS_LABEL.match(ns) or len(ns) > 63 or not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        return None
    return ns, name


def _extra_key(header_rest: str) -> str:
    """unescapeExtraKey(lowercase(key)): percent-decoded; a malformed escape keeps the key as it is."""
    key = header_rest.lower()
    if "%" not in key:
        return key
    try:
        return urllib.parse.unquote(key, errors="strict")
    except UnicodeDecodeError:
        return key


def build_asks(headers: Headers) -> list[_Ask]:
    """buildImpersonationRequests: what the headers ask for, the user first; raises BadImpersonation
    for groups, extras or a uid without a user."""
    user = ""
    groups: list[str] = []
    extras: list[_Ask] = []
    uid = ""
    for name, value in headers:
        low = name.lower()
        if low[:12] != _PREFIX:
            continue
        if low == "impersonate-user":
            user = user or value
        elif low == "impersonate-group":
            groups.append(value)
        elif low == "impersonate-uid":
            uid = uid or value
        elif low.startswith("impersonate-extra-"):
            extras.append(_Ask("UserExtra", value, api_version="authentication.k8s.io/v1",
                               field_path=_extra_key(name[len(EXTRA_PREFIX):])))
    asks: list[_Ask] = []
    if user:
        sa = split_service_account(user)
        asks.append(_Ask("ServiceAccount", sa[1], sa[0]) if sa else _Ask("User", user))
    asks += [_Ask("Group", g) for g in groups]
    asks += extras
    if uid:
        asks.append(_Ask("UID", uid, api_version="authentication.k8s.io/v1"))
    if (groups or extras or uid) and not user:
        raise BadImpersonation(f"requested [{' '.join(a.go() for a in asks)}] without impersonating a user")
    return asks


def impersonate(headers: Headers, requestor: UserInfo, authorize: Authorize) -> UserInfo | None:
    """The user a request acts as (None: it asks for no impersonation). Raises BadImpersonation,
    or the 403 ApiError of the first check the requestor is denied."""
    asks = build_asks(headers)
    if not asks:
        return None
    groups_specified = any(a.kind == "Group" for a in asks)
    username, uid = "", ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}
    for ask in asks:
        if ask.kind == "ServiceAccount":
            username = f"{SA_PREFIX}{ask.namespace}:{ask.name}"
            if not groups_specified:
                groups = [ALL_SA_GROUP, f"{ALL_SA_GROUP}:{ask.namespace}"]
        elif ask.kind == "User":
            username = ask.name
        elif ask.kind == "Group":
            groups.append(ask.name)
        elif ask.kind == "UserExtra":
            extra.setdefault(ask.field_path, []).append(ask.name)
        elif ask.kind == "UID":
            uid = ask.name
        attrs = ask.attributes(requestor)
        allowed, reason = authorize(attrs)
        if not allowed:
            raise forbidden(attrs, reason)
    if username != ANONYMOUS_USER:
        if AUTHENTICATED_GROUP not in groups and UNAUTHENTICATED_GROUP not in groups:
            groups.append(AUTHENTICATED_GROUP)
    elif UNAUTHENTICATED_GROUP not in groups:
        groups.append(UNAUTHENTICATED_GROUP)
    return UserInfo(username, uid, tuple(groups), {k: tuple(v) for k, v in extra.items()})


def strip(headers: Headers) -> list[tuple[str, str]]:
    """The headers without the impersonation ones, which kube deletes before the request goes on."""
    return [(k, v) for k, v in headers if k[:12].lower() != _PREFIX]
