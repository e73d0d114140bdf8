"""kube's impersonation filter, decided without a server: what the headers ask, which checks run,
and the user the request goes on as."""

from __future__ import annotations

import pytest

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.authentication.authenticators import UserInfo
from isthmus.apiserver.authentication.impersonation import (
    BadImpersonation,
    impersonate,
    requested,
    split_service_account,
    strip,
)
from isthmus.apiserver.authorization.attributes import Attributes

BOB = UserInfo("bob", groups=("system:authenticated",))


def allow_all(seen: list[Attributes]):  # type: ignore[no-untyped-def]
    def authorize(a: Attributes) -> tuple[bool, str]:
        seen.append(a)
        return True, ""
    return authorize


def test_each_impersonation_is_checked_as_kube_names_it() -> None:
    seen: list[Attributes] = []
    user = impersonate([("Impersonate-User", "jane"), ("Impersonate-Group", "devs"), ("Accept", "*/*"),
                        ("Impersonate-Extra-Example.com%2FScope", "read"), ("Impersonate-Uid", "42")],
                       BOB, allow_all(seen))
    assert user == UserInfo("jane", "42", ("devs", "system:authenticated"), {"example.com/scope": ("read",)})
    assert [(a.verb, a.api_group, a.combined_resource, a.namespace, a.name) for a in seen] == [
        ("impersonate", "", "users", "", "jane"),
        ("impersonate", "", "groups", "", "devs"),
        ("impersonate", "authentication.k8s.io", "userextras/example.com/scope", "", "read"),
        ("impersonate", "authentication.k8s.io", "uids", "", "42")]
    assert all(a.user is BOB for a in seen)


def test_service_accounts_get_their_groups_unless_groups_are_given() -> None:
    seen: list[Attributes] = []
    sa = impersonate([("Impersonate-User", "system:serviceaccount:ns:robot")], BOB, allow_all(seen))
    assert sa is not None and sa.groups == ("system:serviceaccounts", "system:serviceaccounts:ns",
                                            "system:authenticated")
    assert (seen[0].resource, seen[0].namespace, seen[0].name) == ("serviceaccounts", "ns", "robot")
    given = impersonate([("Impersonate-User", "system:serviceaccount:ns:robot"), ("Impersonate-Group", "x")],
                        BOB, allow_all([]))
    assert given is not None and given.groups == ("x", "system:authenticated")
    # Not a ServiceAccount name: an ordinary user.
    assert split_service_account("system:serviceaccount:ns:a:b") is None
    assert split_service_account("system:serviceaccount:NS:a") is None


def test_authenticated_and_anonymous_groups() -> None:
    unauth = impersonate([("Impersonate-User", "u"), ("Impersonate-Group", "system:unauthenticated")],
                         BOB, allow_all([]))
    assert unauth is not None and unauth.groups == ("system:unauthenticated",)
    anon = impersonate([("Impersonate-User", "system:anonymous")], BOB, allow_all([]))
    assert anon is not None and anon.groups == ("system:unauthenticated",)


def test_refusals() -> None:
    with pytest.raises(BadImpersonation, match=r"^requested \[\{Group  devs    \} \{UserExtra  v  "
                                               r"authentication.k8s.io/v1  k\}\] without impersonating a user$"):
        impersonate([("Impersonate-Group", "devs"), ("Impersonate-Extra-K", "v")], BOB, allow_all([]))
    with pytest.raises(ApiError) as e:
        impersonate([("Impersonate-User", "jane")], BOB, lambda a: (False, ""))
    assert e.value.code == 403
    assert e.value.message == ('users "jane" is forbidden: User "bob" cannot impersonate resource "users" in API '
                               'group "" at the cluster scope')


def test_headers() -> None:
    assert not requested(["Accept", "Authorization", "Content-Type"])
    assert requested(["Accept", "impersonate-user"])
    assert impersonate([("Accept", "*/*")], BOB, allow_all([])) is None
    assert strip([("Impersonate-User", "a"), ("Accept", "x"), ("IMPERSONATE-EXTRA-A", "b")]) == [("Accept", "x")]
