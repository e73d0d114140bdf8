"""Isthmus: multi-cluster service networking for Kubernetes."""

__version__ = "0.1.0"
