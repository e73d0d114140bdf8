"""Request bodies decoded as kube-apiserver's serializers read them (k8s.io/apimachinery/pkg/runtime/serializer).

- `decoding.py`: JSON and YAML bodies read strictly (duplicate keys reported for fieldValidation),
  nesting depth limits, and `read_body_strict`, a request body by its content type.
- `protobuf.py`: `application/vnd.kubernetes.protobuf` bodies into the dicts the JSON decoder makes.
- `_proto_tables.py`: the generated message tables protobuf.py decodes with (kube v1.32's wire format).
"""
