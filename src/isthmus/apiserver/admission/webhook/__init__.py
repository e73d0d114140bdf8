"""Admission webhooks: kube-apiserver's MutatingAdmissionWebhook and ValidatingAdmissionWebhook
plugins over the stored Mutating/ValidatingWebhookConfigurations (admissionregistration.k8s.io/v1).

dispatch.py matches a write against the webhooks (with ../matching.py, as the policy plugin does)
and calls them (AdmissionReview v1 over HTTPS).
"""
