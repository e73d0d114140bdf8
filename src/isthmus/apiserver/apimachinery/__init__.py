"""What kube-apiserver takes from k8s.io/apimachinery: the API's shared vocabulary, below every other package here.

- `errors.py`: API errors rendered as metav1.Status (apimachinery/pkg/api/errors).
- `meta.py`: ObjectMeta rules (names, generateName, labels, annotations, owners, uids, timestamps).
- `validation.py`: kube's value validators and field errors (pkg/util/validation and its field package).
- `selectors.py`: label and field selectors (pkg/labels, pkg/fields).
- `jsoncopy.py`: copies of JSON data (what DeepCopy is to Go types).
- `patch.py`: JSON patch, JSON merge patch and strategic merge patch (evanphx/json-patch,
  pkg/util/strategicpatch). The one module here that looks up: it reads the request depth limit of
  serializer/decoding.py and the allOf resolution of openapi/schema.py, as strategicpatch reads
  kube-openapi's schemas.
"""
