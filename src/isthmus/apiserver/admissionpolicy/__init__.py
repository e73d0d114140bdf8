"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) in the embedded apiserver.

cel.py compiles and evaluates CEL (cel-python plus kube's checks and extensions), spec.py holds
the objects' defaults, validation and compiled form, engine.py is the admission plugin the
generic store runs on every write.
"""

from isthmus.apiserver.admissionpolicy.engine import ValidatingAdmissionPolicies
from isthmus.apiserver.admissionpolicy.spec import BINDING_KEY, POLICY_KEY

__all__ = ["BINDING_KEY", "POLICY_KEY", "ValidatingAdmissionPolicies"]
