"""The images a local clusterset runs, built on this machine from Debian packages and PyPI only.

`build.build_images()` makes the Isthmus image (mmdebstrap + build/image/recipe.sh, the recipe the
Containerfile runs too) and small images under their usual names (busybox, nginx, pause, agnhost)
as OCI image layouts in a cache keyed by every input; see docs/image.md.
"""
