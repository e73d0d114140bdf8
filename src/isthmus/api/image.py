"""The one Isthmus image: every component runs from it.

The name is kept here and nowhere else: `make image` tags with it, deploy/components/image sets it
for the manifests (a test checks they agree), and kube-lite recognises Isthmus containers by its
repository. The tag is the package version.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

IMAGE_REPOSITORY = "ghcr.io/isthmus-net/isthmus"

try:
    IMAGE_TAG = version("isthmus")
except PackageNotFoundError:  # running from a source tree that was never installed
    IMAGE_TAG = "0.1.0"

IMAGE = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"
