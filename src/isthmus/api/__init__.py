"""Typed models of every resource Isthmus owns, their CRDs, and well-known names.

`CRD_MODELS` is the registry: CRD manifests (`isthmus crds`) and lightkube resources
(`isthmus.kube.resources`) are generated from it. A capability adding kinds appends its
module's tuple here.
"""

from __future__ import annotations

from isthmus.api.base import Resource
from isthmus.api.egress import EGRESS_MODELS
from isthmus.api.lb import LB_MODELS
from isthmus.api.mcs import MCS_MODELS
from isthmus.api.mcsvc import MCSVC_MODELS

CRD_MODELS: tuple[type[Resource], ...] = (*MCS_MODELS, *LB_MODELS, *MCSVC_MODELS, *EGRESS_MODELS)

__all__ = ["CRD_MODELS"]
