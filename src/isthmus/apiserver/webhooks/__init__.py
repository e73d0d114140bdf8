"""Admission webhooks: kube-apiserver's MutatingAdmissionWebhook and ValidatingAdmissionWebhook
plugins over the stored Mutating/ValidatingWebhookConfigurations (admissionregistration.k8s.io/v1).

dispatch.py matches a write against the webhooks and calls them (AdmissionReview v1 over HTTPS).
"""

from isthmus.apiserver.webhooks.dispatch import MWC_KEY, VWC_KEY, Webhooks

__all__ = ["MWC_KEY", "VWC_KEY", "Webhooks"]
