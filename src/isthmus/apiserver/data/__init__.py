"""Reference data shipped with the embedded apiserver (see README.md)."""
