"""Admission, as k8s.io/apiserver/pkg/admission and its plugins: what runs between a write's decoding
and its storage.

- `attributes.py`: `AdmissionRequest`, what every plugin is told about a write, and the
  admission.k8s.io/v1 AdmissionRequest made of it.
- `chain.py`: `Admission`, the in-process hooks and the plugins in kube's order.
- `matching.py`: rules, namespace and object selectors, and the exempt resources, shared by both plugins.
- `policy/`: the ValidatingAdmissionPolicy plugin (CEL, the policy objects, the engine).
- `webhook/`: the mutating and validating admission webhook plugins.
"""
