"""RBAC as kube-apiserver's `--authorization-mode=RBAC` decides (plugin/pkg/auth/authorizer/rbac).

The rule resolver keeps the four RBAC kinds indexed from the store (fed by its write hook, so a
request never scans every binding): roles by name, bindings by subject. A request is allowed
when a rule of a role bound to its user, one of its groups or its ServiceAccount matches it
(ClusterRoleBindings everywhere, RoleBindings in their namespace), with kube's matching:
`*` verbs, groups and resources, `*/<subresource>` (not `<resource>/*`), resourceNames, and
nonResourceURLs with a trailing `*`. Aggregated ClusterRoles are read like any other: their
rules are written by the aggregation controller (controllers/clusterroleaggregation.py).

Escalation prevention (kube's pkg/registry/rbac/validation) lives here too: `covers` and the
message of a refused grant; the strategies (registry/rbac.py) call `confirm_no_escalation`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.authentication.authenticators import UserInfo
from isthmus.apiserver.authorization.attributes import Attributes
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import WatchEvent

__all__ = [
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "GROUP",
    "ROLES",
    "ROLE_BINDINGS",
    "PolicyRule",
    "RuleResolver",
    "Source",
    "compact_string",
    "covers",
    "rule_allows",
]

Obj = dict[str, Any]

GROUP = "rbac.authorization.k8s.io"
ROLES = f"{GROUP}/roles"
CLUSTER_ROLES = f"{GROUP}/clusterroles"
ROLE_BINDINGS = f"{GROUP}/rolebindings"
CLUSTER_ROLE_BINDINGS = f"{GROUP}/clusterrolebindings"
SA_PREFIX = "system:serviceaccount:"


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


@dataclass(frozen=True)
class PolicyRule:
    """rbac/v1 PolicyRule."""

    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def from_api(cls, rule: Any) -> PolicyRule:
        """Lenient: fields of the wrong shape read as empty (validation reports them)."""
        r = rule if isinstance(rule, dict) else {}
        return cls(_strings(r.get("verbs")), _strings(r.get("apiGroups")), _strings(r.get("resources")),
                   _strings(r.get("resourceNames")), _strings(r.get("nonResourceURLs")))

    def to_api(self) -> Obj:
        out: Obj = {"verbs": list(self.verbs)}
        for key, value in (("apiGroups", self.api_groups), ("resources", self.resources),
                           ("resourceNames", self.resource_names), ("nonResourceURLs", self.non_resource_urls)):
            if value:
                out[key] = list(value)
        return out


def rules_of(obj: Obj) -> tuple[PolicyRule, ...]:
    rules = obj.get("rules")
    return tuple(PolicyRule.from_api(r) for r in rules) if isinstance(rules, list) else ()


# ------------------------------------------------------------------------------------------ matching


def _resource_matches(rule: PolicyRule, combined: str, subresource: str) -> bool:
    """rbacv1helpers.ResourceMatches: `*`, the exact `resource[/subresource]`, or `*/<subresource>`."""
    for r in rule.resources:
        if r in ("*", combined):
            return True
        if subresource and r == "*/" + subresource:
            return True
    return False


def _url_matches(rule: PolicyRule, path: str) -> bool:
    for url in rule.non_resource_urls:
        if url in ("*", path) or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(a: Attributes, rule: PolicyRule) -> bool:
    """RBAC's RuleAllows."""
    if not ("*" in rule.verbs or a.verb in rule.verbs):
        return False
    if not a.resource_request:
        return _url_matches(rule, a.path)
    return (("*" in rule.api_groups or a.api_group in rule.api_groups)
            and _resource_matches(rule, a.combined_resource, a.subresource)
            and (not rule.resource_names or a.name in rule.resource_names))


# ------------------------------------------------------------------------------------------ resolver


def _subject_keys(user: UserInfo) -> list[tuple[str, ...]]:
    keys: list[tuple[str, ...]] = [("User", user.username), *(("Group", g) for g in user.groups)]
    if user.username.startswith(SA_PREFIX):
        ns, sep, name = user.username[len(SA_PREFIX):].partition(":")
        if sep and ns and name and ":" not in name:
            keys.append(("ServiceAccount", ns, name))
    return keys


def _binding_subject_key(subject: Any, namespace: str) -> tuple[str, ...] | None:
    """The index key of one subject (kube's appliesToUser, turned around); None: applies to nobody.
    A ServiceAccount without a namespace is in the binding's (none for a ClusterRoleBinding)."""
    if not isinstance(subject, dict):
        return None
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind in ("User", "Group"):
        return (kind, name)
    if kind == "ServiceAccount":
        ns = str(subject.get("namespace") or namespace)
        return ("ServiceAccount", ns, name) if ns else None
    return None


def _describe_subject(subject: Obj, binding_namespace: str) -> str:
    kind, name = str(subject.get("kind", "")), str(subject.get("name", ""))
    if kind == "ServiceAccount":
        return f"{kind} {errors.go_quote(name + '/' + str(subject.get('namespace') or binding_namespace))}"
    return f"{kind} {errors.go_quote(name)}"


@dataclass(frozen=True)
class Source:
    """Which binding gave a rule: kube's clusterRoleBindingDescriber / roleBindingDescriber."""

    binding: Obj
    subject: Obj

    def __str__(self) -> str:
        m = self.binding["metadata"]
        ref = self.binding.get("roleRef") or {}
        ns = m.get("namespace") or ""
        head = (f"RoleBinding {errors.go_quote(m['name'] + '/' + ns)}" if ns
                else f"ClusterRoleBinding {errors.go_quote(m['name'])}")
        return (f"{head} of {ref.get('kind', '')} {errors.go_quote(str(ref.get('name', '')))} to "
                f"{_describe_subject(self.subject, ns)}")


class _Bindings:
    """Bindings of one scope (the cluster, or one namespace) by name and by subject key."""

    def __init__(self) -> None:
        self.by_name: dict[str, Obj] = {}
        self.by_subject: dict[tuple[str, ...], set[str]] = {}

    def _keys(self, binding: Obj) -> set[tuple[str, ...]]:
        ns = binding["metadata"].get("namespace") or ""
        subjects = binding.get("subjects")
        keys = (_binding_subject_key(s, ns) for s in subjects) if isinstance(subjects, list) else ()
        return {k for k in keys if k is not None}

    def put(self, binding: Obj) -> None:
        self.drop(binding["metadata"]["name"])
        name = binding["metadata"]["name"]
        self.by_name[name] = binding
        for k in self._keys(binding):
            self.by_subject.setdefault(k, set()).add(name)

    def drop(self, name: str) -> None:
        old = self.by_name.pop(name, None)
        if old is None:
            return
        for k in self._keys(old):
            names = self.by_subject.get(k)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.by_subject[k]

    def for_user(self, keys: list[tuple[str, ...]]) -> list[Obj]:
        """The bindings naming one of a user's subject keys, by name (a stable order)."""
        names: set[str] = set()
        for k in keys:
            names |= self.by_subject.get(k, set())
        return [self.by_name[n] for n in sorted(names)]


def _applies(keys: list[tuple[str, ...]], subject: Any, namespace: str) -> bool:
    """appliesToUser, for a user known by its subject keys."""
    key = _binding_subject_key(subject, namespace)
    return key is not None and key in keys


def role_not_found(kind: str, name: str, plural: bool) -> errors.ApiError:
    """A role a binding names is missing: kube's listers say `clusterrole.rbac...` (the authorizer),
    its registry `clusterroles.rbac...` (escalation checks)."""
    resource = kind.lower() + ("s" if plural else "")
    return errors.not_found(GROUP, resource, name)


DECISIONS_KEPT = 4096


class RuleResolver:
    write_keys = (CLUSTER_ROLES, ROLES, CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS)
    """kube's DefaultRuleResolver over an index of the store's RBAC objects."""

    def __init__(self, storage: Store) -> None:
        self.storage = storage
        self.cluster_roles: dict[str, tuple[PolicyRule, ...]] = {}
        self.roles: dict[tuple[str, str], tuple[PolicyRule, ...]] = {}
        self.cluster_bindings = _Bindings()
        self.bindings: dict[str, _Bindings] = {}
        # authorize's answers for requests whose answer no object name could change, until the next
        # RBAC write (see authorize).
        self._decisions: dict[tuple[Any, ...], tuple[Source | None, str]] = {}

    def index_all(self) -> None:
        self._decisions.clear()
        for key in (CLUSTER_ROLES, ROLES, CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS):
            for obj in self.storage.list(key):
                self._put(key, obj)

    def on_write(self, ev: WatchEvent) -> None:
        """The store's write hook: keep the index as the store is."""
        if not ev.key.startswith(GROUP):
            return
        self._decisions.clear()
        if ev.type == "DELETED":
            self._drop(ev.key, ev.obj)
        else:
            self._put(ev.key, ev.obj)

    def _put(self, key: str, obj: Obj) -> None:
        m = obj["metadata"]
        if key == CLUSTER_ROLES:
            self.cluster_roles[m["name"]] = rules_of(obj)
        elif key == ROLES:
            self.roles[(m.get("namespace", ""), m["name"])] = rules_of(obj)
        elif key == CLUSTER_ROLE_BINDINGS:
            self.cluster_bindings.put(obj)
        elif key == ROLE_BINDINGS:
            self.bindings.setdefault(m.get("namespace", ""), _Bindings()).put(obj)

    def _drop(self, key: str, obj: Obj) -> None:
        m = obj["metadata"]
        if key == CLUSTER_ROLES:
            self.cluster_roles.pop(m["name"], None)
        elif key == ROLES:
            self.roles.pop((m.get("namespace", ""), m["name"]), None)
        elif key == CLUSTER_ROLE_BINDINGS:
            self.cluster_bindings.drop(m["name"])
        elif key == ROLE_BINDINGS:
            scope = self.bindings.get(m.get("namespace", ""))
            if scope is not None:
                scope.drop(m["name"])

    def role_reference_rules(self, role_ref: Any, namespace: str, *, registry: bool = False
                             ) -> tuple[PolicyRule, ...]:
        """GetRoleReferenceRules; raises NotFound for a missing role (registry: worded as the
        registry words it), BadRequest for an unknown kind."""
        ref = role_ref if isinstance(role_ref, dict) else {}
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "ClusterRole":
            rules = self.cluster_roles.get(name)
        elif kind == "Role":
            rules = self.roles.get((namespace, name))
        else:
            raise errors.bad_request(f"unsupported role reference kind: {errors.go_quote(str(kind or ''))}")
        if rules is None:
            raise role_not_found(str(kind), name, registry)
        return rules

    def visit(self, user: UserInfo, namespace: str) -> Iterator[tuple[Source | None, PolicyRule | None, str]]:
        """VisitRulesFor: (source, rule, "") for each rule that applies to `user` in `namespace`,
        ClusterRoleBindings first; (None, None, error) for a binding whose role is missing."""
        scopes: list[tuple[_Bindings, str]] = [(self.cluster_bindings, "")]
        if namespace and namespace in self.bindings:
            scopes.append((self.bindings[namespace], namespace))
        keys = _subject_keys(user)
        for scope, ns in scopes:
            for binding in scope.for_user(keys):
                subject = next((s for s in binding.get("subjects") or [] if _applies(keys, s, ns)), None)
                if subject is None:
                    continue
                try:
                    rules = self.role_reference_rules(binding.get("roleRef"), ns)
                except errors.ApiError as e:
                    yield None, None, e.message
                    continue
                source = Source(binding, subject)
                for rule in rules:
                    yield source, rule, ""

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[PolicyRule], list[str]]:
        """Every rule that applies to `user` in `namespace`, and the errors met on the way."""
        rules: list[PolicyRule] = []
        errs: list[str] = []
        for _, rule, err in self.visit(user, namespace):
            if rule is not None:
                rules.append(rule)
            elif err:
                errs.append(err)
        return rules, errs

    def authorize(self, a: Attributes) -> tuple[Source | None, str]:
        """RBACAuthorizer.Authorize: (the source that allowed it, else None; a denial's reason, naming
        the errors met). An allowance's reason is `RBAC: allowed by <source>`, formatted by whoever
        needs it: most requests never do."""
        key: tuple[Any, ...] | None = None
        if a.resource_request:
            key = (a.user.username, tuple(a.user.groups), a.verb, a.api_group, a.resource, a.subresource, a.namespace)
            hit = self._decisions.get(key)
            if hit is not None:
                return hit
        errs: list[str] = []
        named = False  # a rule met on the way names objects: the answer may differ for another name
        answer: tuple[Source | None, str] | None = None
        for source, rule, err in self.visit(a.user, a.namespace):
            if rule is not None:
                named = named or bool(rule.resource_names)
                if source is not None and rule_allows(a, rule):
                    answer = (source, "")
                    break
            if err:
                errs.append(err)
        if answer is None:
            answer = (None, ("RBAC: " + aggregate(errs)) if errs else "")
        # The same rules in the same order give the same answer to a request that differs only in
        # the object's name, unless a rule met names objects; an RBAC write clears them all. A
        # member's agent asks the broker the same few questions for every object it writes.
        if key is not None and not named:
            if len(self._decisions) >= DECISIONS_KEPT:
                self._decisions.clear()
            self._decisions[key] = answer
        return answer


def aggregate(messages: list[str]) -> str:
    """utilerrors.NewAggregate(...).Error(): one alone as is, several as `[a, b]`."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# ------------------------------------------------------------------------------------------ escalation


def _breakdown(rule: PolicyRule) -> Iterator[PolicyRule]:
    """rbacv1helpers.BreakdownRule: one rule per group, resource, verb (and name); one per URL and verb."""
    for group in rule.api_groups:
        for resource in rule.resources:
            for verb in rule.verbs:
                if rule.resource_names:
                    for name in rule.resource_names:
                        yield PolicyRule((verb,), (group,), (resource,), (name,))
                else:
                    yield PolicyRule((verb,), (group,), (resource,))
    for url in rule.non_resource_urls:
        for verb in rule.verbs:
            yield PolicyRule((verb,), non_resource_urls=(url,))


def _resource_covers(owner: tuple[str, ...], sub: str) -> bool:
    if "*" in owner or sub in owner:
        return True
    return "/" in sub and "*/" + sub.split("/", 1)[1] in owner


def _url_covers(owner: str, sub: str) -> bool:
    return owner == sub or (owner.endswith("*") and sub.startswith(owner.rstrip("*")))


def _rule_covers(owner: PolicyRule, sub: PolicyRule) -> bool:
    """validation.ruleCovers: the owner rule grants every atomic permission of `sub`."""
    if sub.resource_names:
        names = not owner.resource_names or set(sub.resource_names) <= set(owner.resource_names)
    else:
        names = not owner.resource_names
    return (("*" in owner.verbs or set(sub.verbs) <= set(owner.verbs))
            and ("*" in owner.api_groups or set(sub.api_groups) <= set(owner.api_groups))
            and all(_resource_covers(owner.resources, r) for r in sub.resources)
            and all(any(_url_covers(o, u) for o in owner.non_resource_urls) for u in sub.non_resource_urls)
            and names)


def covers(owner_rules: Iterable[PolicyRule], rules: Iterable[PolicyRule]) -> list[PolicyRule]:
    """validation.Covers: the atomic permissions of `rules` no owner rule grants (empty: covered)."""
    owners = list(owner_rules)
    return [sub for rule in rules for sub in _breakdown(rule) if not any(_rule_covers(o, sub) for o in owners)]


def _compact(rules: list[PolicyRule]) -> list[PolicyRule]:
    """validation.CompactRules: simple rules (one group, one resource, at most one name) that differ
    only by verb become one."""
    out: list[PolicyRule] = []
    simple: dict[tuple[str, str, tuple[str, ...]], PolicyRule] = {}
    for r in rules:
        if len(r.api_groups) == 1 and len(r.resources) == 1 and len(r.resource_names) <= 1 and not r.non_resource_urls:
            key = (r.api_groups[0], r.resources[0], r.resource_names)
            prev = simple.get(key)
            simple[key] = r if prev is None else PolicyRule(prev.verbs + r.verbs, prev.api_groups, prev.resources,
                                                           prev.resource_names)
        else:
            out.append(r)
    return out + list(simple.values())


def _go_strings(values: tuple[str, ...]) -> str:
    """fmt's %q of a []string: `["a" "b"]`."""
    return "[" + " ".join(errors.go_quote(v) for v in values) + "]"


def compact_string(rule: PolicyRule) -> str:
    """rbacv1helpers.CompactString, as escalation errors list missing permissions."""
    parts = [f"{label}:{_go_strings(v)}" for label, v in (
        ("APIGroups", rule.api_groups), ("Resources", rule.resources), ("NonResourceURLs", rule.non_resource_urls),
        ("ResourceNames", rule.resource_names), ("Verbs", rule.verbs)) if v]
    return "{" + ", ".join(parts) + "}"


def escalation_message(user: UserInfo, missing: list[PolicyRule], resolution_errors: list[str]) -> str:
    """ConfirmNoEscalation's error text."""
    lines = sorted({compact_string(r) for r in _compact(missing)})
    msg = (f"user {errors.go_quote(user.username)} (groups={_go_strings(user.groups)}) is attempting to grant "
           "RBAC permissions not currently held:\n" + "\n".join(lines))
    if resolution_errors:
        msg += f"; resolution errors: [{aggregate(resolution_errors)}]"
    return msg


def only_gc_fields_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """rbacregistry.IsOnlyMutatingGCFields: the write changes nothing but ownerReferences and
    finalizers (what the garbage collector edits), so it needs no escalation check."""
    ignored = {"ownerReferences", "finalizers", "selfLink", "managedFields", "resourceVersion", "uid",
               "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds"}

    def view(o: Mapping[str, Any]) -> Obj:
        m = {k: v for k, v in (o.get("metadata") or {}).items() if k not in ignored}
        return {**{k: v for k, v in o.items() if k not in ("metadata", "apiVersion", "kind")}, "metadata": m}

    return view(new) == view(old)
