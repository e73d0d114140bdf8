"""Pod Security Admission (k8s.io/pod-security-admission as kube-apiserver v1.32 builds it in)."""

from isthmus.apiserver.admission.podsecurity.plugin import install

__all__ = ["install"]
