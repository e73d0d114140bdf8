"""OpenAPI: the structural schemas objects are checked against, and the documents clients read.

- `schema.py`: structural OpenAPI v3 schemas: validation (kube's 422 causes), defaulting and pruning
  (apiextensions-apiserver's schema packages and kube-openapi's validator).
- `builtin_schemas.py`: the schemas of the built-in kinds, from lightkube's models plus kube's
  x-kubernetes-* tags.
- `builder.py`: the /openapi/v2 and /openapi/v3 documents of the served resources (kube-openapi's builders).
- `proto.py`: /openapi/v2 as gnostic's protobuf, and the content negotiation for it.
"""
