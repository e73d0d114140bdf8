"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) in the embedded apiserver.

cel.py compiles and evaluates CEL (cel-python plus kube's checks and extensions; celfast.py its
fast paths), spec.py holds the objects' defaults, validation and compiled form, engine.py is the
admission plugin the generic store runs on every write. What a write must look like for a policy
to apply is shared with the webhooks in ../matching.py.
"""
