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

NAMESPACE = "isthmus-system"
"""Where deploy/ installs the components of every cluster and of the broker (`isthmus version` reads them there)."""


def image_version(image: str) -> str:
    """The Isthmus version an image runs: its tag (or digest) when it is the Isthmus image, else the image."""
    repository, sep, tag = image.rpartition(":")
    if "@" in image:
        repository, _, digest = image.partition("@")
        return digest[:19] if repository.split(":")[0] == IMAGE_REPOSITORY else image
    if sep and "/" not in tag and repository == IMAGE_REPOSITORY:
        return tag
    return image
