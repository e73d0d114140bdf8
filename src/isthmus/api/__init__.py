"""Typed models of every resource Isthmus owns, their CRDs, and well-known names.

`CRD_MODELS` is the registry: CRD manifests (`isthmus crds`) and lightkube resources
(`isthmus.kube.resources`) are generated from it. A capability adding kinds appends its
module's tuple here.

The registry is built on first use: a component that reads one capability's kinds imports that
capability's models alone (`isthmus.api.mcs` without the load balancer's, egress's and
MultiClusterService's classes: about a tenth of a second of a discovery agent's start, and 2-3 MB).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from isthmus.api.base import Resource

    CRD_MODELS: tuple[type[Resource], ...]

__all__ = ["CRD_MODELS"]


def __getattr__(name: str) -> Any:
    if name != "CRD_MODELS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from isthmus.api.about import ABOUT_MODELS
    from isthmus.api.egress import EGRESS_MODELS
    from isthmus.api.lb import LB_MODELS
    from isthmus.api.mcs import MCS_MODELS
    from isthmus.api.mcsvc import MCSVC_MODELS

    models = globals()["CRD_MODELS"] = (*MCS_MODELS, *LB_MODELS, *MCSVC_MODELS, *EGRESS_MODELS, *ABOUT_MODELS)
    return models
