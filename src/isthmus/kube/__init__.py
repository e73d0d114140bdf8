"""Glue between Isthmus and any Kubernetes API: client construction from kubeconfigs (`client`),
lightkube resources for our CRDs (`resources`), apply/status helpers (`helpers`), and which service an
object belongs to (`keys`).
"""

