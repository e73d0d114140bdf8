"""POST .../pods/<name>/binding and the legacy POST .../bindings: a Pod assigned to a Node (kube's BindingREST).

A Binding (core/v1) is not stored: it sets the Pod's spec.nodeName once, copies the Binding's
annotations onto the Pod and marks it PodScheduled, all in one write of the Pod with the
storage's own optimistic update, as kube-apiserver 1.32's pkg/registry/core/pod/storage does
(neither the Pod's strategy nor its field manager take part: kube writes the Pod straight to
storage). Errors are kube's, word for word: the refusals of that write become 409 Conflicts on
`pods/binding`, a Binding that fails validation a 500 without a reason (kube returns the
aggregate as a plain error).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from isthmus.apiserver.apimachinery import errors, meta
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.handlers.common import HandlerContext, json_response, read_body, subresource_object
from isthmus.apiserver.handlers.subadmission import admit_create

Obj = dict[str, Any]

KIND, API_VERSION = "Binding", "v1"
PODS_KEY = "/pods"


def is_binding(group: str, version: str, rest: list[str]) -> bool:
    """Whether a resource path (after /api/v1) is pods/<name>/binding or the legacy bindings collection."""
    if group or version != "v1" or not rest or rest[0] != "namespaces":
        return False
    return (len(rest) == 5 and rest[2] == "pods" and rest[4] == "binding") or (len(rest) == 3 and rest[2] == "bindings")


def validate(binding: Obj) -> list[str]:
    """kube's ValidatePodBinding, as the field errors' texts (kube joins them into one message)."""
    target = binding.get("target") if isinstance(binding.get("target"), dict) else {}
    assert isinstance(target, dict)
    out = []
    kind = str(target.get("kind") or "")
    if kind and kind != "Node":
        out.append(f'target.kind: Unsupported value: {errors.go_quote(kind)}: supported values: "Node", "<empty>"')
    if not target.get("name"):
        out.append("target.name: Required value")
    return out


def _aggregate(messages: list[str]) -> str:
    """utilerrors.Aggregate's Error(): one message alone, several in brackets."""
    return messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"


def set_pod_scheduled(status: Obj, now: str) -> None:
    """podutil.UpdatePodCondition with PodScheduled=True: a transition time only when the status changes."""
    conditions = status.setdefault("conditions", [])
    for i, c in enumerate(conditions):
        if c.get("type") == "PodScheduled":
            kept = c.get("lastTransitionTime") if c.get("status") == "True" else now
            conditions[i] = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                             "lastTransitionTime": kept}
            return
    conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now})


def assign(live: Obj, node: str, annotations: Obj, now: str) -> Obj:
    """The bound Pod, or ApiError when kube's update function refuses (words of setPodNodeAndMetadata)."""
    name = live["metadata"]["name"]

    def refused(why: str) -> errors.ApiError:
        return errors.conflict("", "pods/binding", name, why)

    if live["metadata"].get("deletionTimestamp"):
        raise refused(f"pod {name} is being deleted, cannot be assigned to a host")
    spec = live.get("spec") or {}
    if spec.get("nodeName"):
        raise refused(f"pod {name} is already assigned to node {errors.go_quote(str(spec['nodeName']))}")
    if spec.get("schedulingGates"):
        raise refused(f"pod {name} has non-empty .spec.schedulingGates")
    pod: Obj = clone(live)
    pod["spec"]["nodeName"] = node
    if annotations:
        pod["metadata"]["annotations"] = {**(pod["metadata"].get("annotations") or {}), **annotations}
    status = pod.get("status")
    if not isinstance(status, dict):
        pod["status"] = status = {}
    set_pod_scheduled(status, now)
    return pod


def _decode(body: Any) -> Obj:
    return subresource_object(body, KIND, (API_VERSION,))


async def serve(ctx: HandlerContext, request: web.Request, rest: list[str]) -> web.Response:
    if request.method != "POST":
        raise errors.method_not_allowed()
    namespace = rest[1]
    dry_run = request.query.get("dryRun") == "All"
    if request.query.get("dryRun") not in (None, "", "All"):
        raise errors.bad_request(f"unsupported dry run value: {request.query.get('dryRun')!r}")
    binding = _decode(await read_body(ctx, request))
    m = binding["metadata"]
    if m.get("namespace") and m["namespace"] != namespace:
        raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the "
                                 "request")
    body_name = str(m.get("name") or "")
    name = rest[3] if len(rest) == 5 else body_name  # the legacy collection takes the Pod's name from the body
    if not name:
        raise errors.bad_request("Name parameter required.")
    if body_name != name:
        raise errors.bad_request("name in URL does not match name in Binding object")
    problems = validate(binding)
    if problems:
        raise errors.ApiError(500, "", _aggregate(problems))
    binding = await admit_create(ctx, request, KIND, "binding", namespace, name, binding, dry_run)
    m = binding.get("metadata") if isinstance(binding.get("metadata"), dict) else {}
    assert isinstance(m, dict)
    if validate(binding):  # a mutating webhook broke it
        raise errors.ApiError(500, "", _aggregate(validate(binding)))
    if ctx.storage.get("/namespaces", "", namespace) is None:
        raise errors.not_found("", "namespaces", namespace)
    live = ctx.storage.get(PODS_KEY, namespace, name)
    if live is None:
        raise errors.not_found("", "pods", name)
    lm = live["metadata"]
    # The Binding's uid and resourceVersion are preconditions on the Pod (kube's storage.Preconditions).
    if m.get("uid") and m["uid"] != lm.get("uid"):
        raise errors.conflict("", "pods", name, f"Precondition failed: UID in precondition: {m['uid']}, UID in "
                                                f"object meta: {lm.get('uid')}")
    if m.get("resourceVersion") and m["resourceVersion"] != lm.get("resourceVersion"):
        raise errors.conflict("", "pods", name, f"Precondition failed: ResourceVersion in precondition: "
                                                f"{m['resourceVersion']}, ResourceVersion in object meta: "
                                                f"{lm.get('resourceVersion')}")
    annotations = m.get("annotations") if isinstance(m.get("annotations"), dict) else {}
    assert isinstance(annotations, dict)
    pod = assign(live, str(binding["target"]["name"]), annotations, meta.now_rfc3339())
    if not dry_run:
        ctx.storage.update(PODS_KEY, pod)  # nothing awaited since the read: the write is atomic
    return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                         status=201, request=request)
