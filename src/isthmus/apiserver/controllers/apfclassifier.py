"""Which FlowSchema and priority level a request falls into, for the response headers kube-apiserver's
API Priority and Fairness filter sets (`X-Kubernetes-PF-FlowSchema-UID`,
`X-Kubernetes-PF-PriorityLevel-UID`; Go writes them as `X-Kubernetes-Pf-Flowschema-Uid` and
`X-Kubernetes-Pf-Prioritylevel-Uid`). Nothing is queued: only the classification is kube's.

kube's matching (k8s.io/apiserver/pkg/util/flowcontrol, rule.go): FlowSchemas in order of
matchingPrecedence, then name; the first with a rule whose subjects include the user (User by
name or `*`, Group among the user's groups or `*`, ServiceAccount by namespace and name or `*`)
and, for a resource request, a resource rule matching verb, group, resource and namespace (a
cluster-scoped request only where `clusterScope` is true), for a non-resource request a
non-resource rule matching verb and path (`*`, exact, or a prefix ending in `*`). A schema whose
priority level does not exist is skipped, as kube skips dangling ones.

Per request this is a dict lookup: answers are kept per user while the first schema naming the
user matches every request of theirs (system:masters' `exempt`), else per user and request
attributes (4,096 at most); a write to either kind forgets them all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from isthmus.apiserver.authentication.authenticators import UserInfo
from isthmus.apiserver.authorization.attributes import Attributes
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import WatchEvent

Obj = dict[str, Any]

FLOW_SCHEMAS = "flowcontrol.apiserver.k8s.io/flowschemas"
PRIORITY_LEVELS = "flowcontrol.apiserver.k8s.io/prioritylevelconfigurations"
FS_HEADER = "X-Kubernetes-Pf-Flowschema-Uid"
PL_HEADER = "X-Kubernetes-Pf-Prioritylevel-Uid"
SA_PREFIX = "system:serviceaccount:"
KEPT = 4096


class Classification:
    """A request's FlowSchema and priority level uids, and the header lines that carry them."""

    __slots__ = ("flow_schema_uid", "lines", "priority_level_uid")

    def __init__(self, flow_schema_uid: str, priority_level_uid: str) -> None:
        self.flow_schema_uid = flow_schema_uid
        self.priority_level_uid = priority_level_uid
        self.lines = f"{FS_HEADER}: {flow_schema_uid}\r\n{PL_HEADER}: {priority_level_uid}\r\n".encode()


def _subject_matches(subject: Any, user: UserInfo) -> bool:
    if not isinstance(subject, dict):
        return False
    kind = subject.get("kind")
    if kind == "User":
        name = (subject.get("user") or {}).get("name")
        return name is not None and name in ("*", user.username)
    if kind == "Group":
        name = (subject.get("group") or {}).get("name")
        return name is not None and (name == "*" or name in user.groups)
    if kind == "ServiceAccount":
        sa = subject.get("serviceAccount") or {}
        ns, name = sa.get("namespace"), sa.get("name")
        if not ns or not name or not user.username.startswith(SA_PREFIX):
            return False
        user_ns, _, user_name = user.username[len(SA_PREFIX):].partition(":")
        return bool(user_ns == ns and (name == "*" or user_name == name))
    return False


def _has(values: Any, value: str, every: str = "*") -> bool:
    return isinstance(values, list) and (every in values or value in values)


def _resource_rule_matches(rule: Obj, a: Attributes) -> bool:
    resources = rule.get("resources")
    if not (_has(rule.get("verbs"), a.verb) and _has(rule.get("apiGroups"), a.api_group)
            and _has(resources, a.combined_resource)):
        return False
    if not a.namespace:
        return bool(rule.get("clusterScope"))
    return _has(rule.get("namespaces"), a.namespace)


def _url_rule_matches(rule: Obj, a: Attributes) -> bool:
    if not _has(rule.get("verbs"), a.verb):
        return False
    for url in rule.get("nonResourceURLs") or []:
        if url in ("*", a.path) or (url.endswith("*") and a.path.startswith(url[:-1])):
            return True
    return False


def _matches_everything(rule: Obj) -> bool:
    """A rule every request of its subjects matches: `*` verbs, groups, resources in every namespace
    and the cluster scope, and `*` verbs on every URL."""
    res = rule.get("resourceRules") or []
    urls = rule.get("nonResourceRules") or []
    return (any(r.get("verbs") == ["*"] and r.get("apiGroups") == ["*"] and r.get("resources") == ["*"]
                and r.get("clusterScope") and "*" in (r.get("namespaces") or []) for r in res)
            and any(u.get("verbs") == ["*"] and "*" in (u.get("nonResourceURLs") or []) for u in urls))


def rule_matches(rule: Obj, user: UserInfo, a: Attributes) -> bool:
    """matchesPolicyRule: a subject names the user, and a rule of the request's kind matches it."""
    if not any(_subject_matches(s, user) for s in rule.get("subjects") or []):
        return False
    if a.resource_request:
        return any(_resource_rule_matches(r, a) for r in rule.get("resourceRules") or [])
    return any(_url_rule_matches(r, a) for r in rule.get("nonResourceRules") or [])


class FlowClassifier:
    write_keys = (FLOW_SCHEMAS, PRIORITY_LEVELS)

    def __init__(self, storage: Store) -> None:
        self.storage = storage
        self._schemas: list[tuple[Obj, Classification]] | None = None
        self._by_user: dict[tuple[str, tuple[str, ...]], Classification | None] = {}
        self._by_request: dict[tuple[Any, ...], Classification | None] = {}

    def on_write(self, ev: WatchEvent) -> None:
        self._schemas = None
        self._by_user.clear()
        self._by_request.clear()

    def _load(self) -> list[tuple[Obj, Classification]]:
        if self._schemas is None:
            levels = {p["metadata"]["name"]: p["metadata"].get("uid", "") for p in self.storage.list(PRIORITY_LEVELS)}
            schemas = sorted(self.storage.list(FLOW_SCHEMAS),
                             key=lambda f: (int((f.get("spec") or {}).get("matchingPrecedence") or 0),
                                            f["metadata"]["name"]))
            loaded = []
            for fs in schemas:
                level = ((fs.get("spec") or {}).get("priorityLevelConfiguration") or {}).get("name")
                if level in levels:
                    loaded.append((fs, Classification(fs["metadata"].get("uid", ""), levels[level])))
            self._schemas = loaded
        return self._schemas

    def _for_user(self, user: UserInfo) -> Classification | None:
        """The answer for every request of this user, or None when it depends on the request: the
        first schema with a rule naming the user decides, if that rule matches everything."""
        for fs, answer in self._load():
            for rule in (fs.get("spec") or {}).get("rules") or []:
                if any(_subject_matches(s, user) for s in rule.get("subjects") or []):
                    return answer if _matches_everything(rule) else None
        return None

    def classify(self, user: UserInfo, attributes: Callable[[], Attributes]) -> Classification | None:
        """The request's classification (None: no schema matches); `attributes` is asked only when
        the user's answer depends on the request."""
        key = (user.username, user.groups)
        if key in self._by_user:
            fixed = self._by_user[key]
        else:
            if len(self._by_user) >= KEPT:
                self._by_user.clear()
            fixed = self._by_user[key] = self._for_user(user)
        if fixed is not None:
            return fixed
        a = attributes()
        rkey = (key, a.verb, a.api_group, a.combined_resource, a.namespace) if a.resource_request else (key, a.verb,
                                                                                                         a.path)
        hit = self._by_request.get(rkey, False)
        if hit is not False:
            return hit  # type: ignore[return-value]
        answer = next((c for fs, c in self._load() for rule in (fs.get("spec") or {}).get("rules") or []
                       if rule_matches(rule, user, a)), None)
        if len(self._by_request) >= KEPT:
            self._by_request.clear()
        self._by_request[rkey] = answer
        return answer
