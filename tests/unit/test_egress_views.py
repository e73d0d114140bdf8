"""`isthmus show egress` rows: what a user reads of ExternalServices and claims."""

from __future__ import annotations

from isthmus.egress.views import claim_rows, external_service_rows


def test_an_external_service_row_lists_each_source_with_its_claim_and_address() -> None:
    es = {"metadata": {"name": "db", "namespace": "shop"},
          "spec": {"targetIP": "127.48.0.10", "ports": [{"port": 5432}, {"port": 53, "protocol": "UDP"}],
                   "sources": [{"service": {"name": "api"}, "sourceIPClaimName": "api-ip"},
                               {"service": {"name": "jobs", "namespace": "batch"}, "sourceIPClaimName": "jobs-ip"}]},
          "status": {"address": "db.external-services", "forwarder": "isthmus-system/egress-db-0123456789",
                     "sources": [{"service": "shop/api", "claim": "api-ip", "sourceIP": "127.32.1.1", "endpoints": 2}],
                     "conditions": [{"type": "Ready", "status": "False", "reason": "ClaimNotBound",
                                     "message": "ClaimsBound: SourceIPClaim shop/jobs-ip is Pending",
                                     "lastTransitionTime": "2026-11-25T00:00:00Z"}]}}
    [row] = external_service_rows([es])
    assert (row["namespace"], row["name"], row["target"], row["ports"]) == ("shop", "db", "127.48.0.10",
                                                                            ["5432/TCP", "53/UDP"])
    assert row["ready"] == "False" and "jobs-ip is Pending" in row["problem"]
    assert [(s["service"], s["claim"], s["sourceIP"], s["endpoints"]) for s in row["sources"]] == [
        ("shop/api", "api-ip", "127.32.1.1", 2), ("batch/jobs", "jobs-ip", "", None)]


def test_claim_rows_say_why_a_claim_waits() -> None:
    rows = claim_rows([
        {"metadata": {"name": "b", "namespace": "x"}, "spec": {"sourceIPClassName": "lab"},
         "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False", "reason": "ClassExhausted",
                                                        "message": "no free address",
                                                        "lastTransitionTime": "2026-11-25T00:00:00Z"}]}},
        {"metadata": {"name": "a", "namespace": "x"}, "spec": {"sourceIPClassName": "lab"},
         "status": {"phase": "Bound", "sourceIP": "127.32.1.7"}},
    ])
    assert [(r["name"], r["phase"], r["sourceIP"], r["reason"], r["message"]) for r in rows] == [
        ("a", "Bound", "127.32.1.7", "", ""), ("b", "Pending", "", "ClassExhausted", "no free address")]
