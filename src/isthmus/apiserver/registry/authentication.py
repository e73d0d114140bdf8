"""authentication.k8s.io reviews (kube's pkg/registry/authentication): virtual, create-only.

TokenReview asks the server's authenticator chain about a token, as kube's tokenreview REST
does (the token alone, as a bearer token); SelfSubjectReview answers who the requester is
(`kubectl auth whoami`). Neither is stored.
"""

from __future__ import annotations

from typing import Any, ClassVar

from isthmus.apiserver.apimachinery import errors, meta
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.registry.strategy import Strategy, VirtualRequest

Obj = dict[str, Any]


class TokenReviewStrategy(Strategy):
    stored: ClassVar[bool] = False

    def create_virtual(self, obj: Obj, request: VirtualRequest) -> Obj:
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            raise errors.bad_request("token is required for TokenReview in authentication")
        wanted = spec.get("audiences")
        audiences = [str(a) for a in wanted] if isinstance(wanted, list) and wanted else []
        resp, error = request.authenticator.review_token(token, audiences or request.authenticator.api_audiences)
        # Go's encoding of TokenReviewStatus: false, "" and empty lists are omitted; `user` is a
        # struct, so it is always there, {} when nobody was recognised.
        status: Obj = {}
        if resp is not None:
            status["authenticated"] = True
        status["user"] = resp.user.to_api() if resp is not None else {}
        if error:
            status["error"] = error
        if resp is not None and resp.audiences:
            status["audiences"] = list(resp.audiences)
        out: Obj = clone(obj)  # kube answers with the review it was sent, status filled in
        out["metadata"] = {**(out.get("metadata") or {}), "creationTimestamp": None}
        out["status"] = status
        return out


class SelfSubjectReviewStrategy(Strategy):
    stored: ClassVar[bool] = False

    def create_virtual(self, obj: Obj, request: VirtualRequest) -> Obj:
        # kube builds a new object: nothing of the request body but its type is kept.
        return {"kind": obj["kind"], "apiVersion": obj["apiVersion"],
                "metadata": {"creationTimestamp": meta.now_rfc3339()},
                "status": {"userInfo": request.user.to_api()}}
