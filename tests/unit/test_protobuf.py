"""Kubernetes protobuf request decoding (application/vnd.kubernetes.protobuf).

Oracle: fixtures/protobuf/*.pb are request bodies captured from real kubectl v1.32 (typed-client
commands, see fixtures/protobuf/README.md); the matching *.json is what the same kubectl command
printed with `--dry-run=client -o json`, i.e. kubectl's own Go structs JSON-encoded. The decoder
must give exactly that, minus the JSON-encoder noise it documents dropping (`creationTimestamp:
null` of a zero metav1.Time and an empty top-level `status: {}`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.serializer import protobuf
from isthmus.apiserver.serializer._proto_tables import INLINE, MAP, MESSAGES, REPEATED, ROOTS
from isthmus.apiserver.serializer.protobuf import decode_object, go_duration

FIXTURES = Path(__file__).parent / "fixtures" / "protobuf"
ORACLE_CASES = sorted(p.stem for p in FIXTURES.glob("*.pb") if (FIXTURES / f"{p.stem}.json").exists())
ALL_PB = sorted(FIXTURES.glob("*.pb"))


def _pb(name: str) -> bytes:
    return (FIXTURES / f"{name}.pb").read_bytes()


def _drop_null_creation_timestamps(obj: Any) -> None:
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict) and "creationTimestamp" in meta and meta["creationTimestamp"] is None:
            del meta["creationTimestamp"]
        for v in obj.values():
            _drop_null_creation_timestamps(v)
    elif isinstance(obj, list):
        for v in obj:
            _drop_null_creation_timestamps(v)


def _no_nulls(obj: Any) -> bool:
    if obj is None:
        return False
    if isinstance(obj, dict):
        return all(_no_nulls(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_no_nulls(v) for v in obj)
    return True


def _oracle(name: str) -> dict[str, Any]:
    exp: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    _drop_null_creation_timestamps(exp)
    if exp.get("status") == {}:
        del exp["status"]
    assert _no_nulls(exp), "oracle has a null besides creationTimestamp; decide how the decoder treats it"
    return exp


def _bad(raw: bytes, *needles: str) -> ApiError:
    with pytest.raises(ApiError) as ei:
        decode_object(raw)
    assert ei.value.code == 400 and ei.value.reason == "BadRequest"
    for n in needles:
        assert n in ei.value.message
    return ei.value


# ---------------------------------------------------------------------------------------- tiny encoder
# Hand-written field numbers below are from the kube v1.32 generated.proto files.


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def f(num: int, value: bytes | str | int | bool) -> bytes:
    """One field: int/bool -> varint (wire 0), bytes/str -> length-delimited (wire 2)."""
    if isinstance(value, bool | int):
        return _varint(num << 3) + _varint(int(value))
    data = value.encode() if isinstance(value, str) else value
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def m(*fields: bytes) -> bytes:
    return b"".join(fields)


def entry(k: str, v: bytes | str) -> bytes:
    return m(f(1, k), f(2, v))


def envelope(api_version: str, kind: str, raw: bytes, *extra: bytes) -> bytes:
    return b"k8s\x00" + m(f(1, m(f(1, api_version), f(2, kind))), f(2, raw), *extra)


def meta(name: str | bytes, **more: bytes) -> bytes:
    return f(1, m(f(1, name), *more.values()))


# ---------------------------------------------------------------------------------------- real kubectl bodies


def test_fixtures_present() -> None:
    assert len(ORACLE_CASES) >= 15
    for name in (
        "namespace",
        "configmap",
        "secret",
        "service_clusterip",
        "service_nodeport",
        "deployment_replicas0",
        "deployment_replicas3",
        "ingress",
        "pod_debug_copy_rich",
    ):
        assert name in ORACLE_CASES


@pytest.mark.parametrize("name", ORACLE_CASES)
def test_kubectl_body_decodes_to_kubectl_json(name: str) -> None:
    assert decode_object(_pb(name)) == _oracle(name)


def test_namespace_exact() -> None:
    assert decode_object(_pb("namespace")) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "foo"},
        "spec": {},
    }


def test_deployment_pointer_zero_replicas_is_kept() -> None:
    d0 = decode_object(_pb("deployment_replicas0"))
    assert d0["spec"]["replicas"] == 0
    assert d0["spec"]["template"]["spec"]["containers"] == [
        {"name": "nginx", "image": "nginx", "resources": {}}
    ]
    d3 = decode_object(_pb("deployment_replicas3"))
    assert d3["spec"]["replicas"] == 3
    assert d3["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 8080}]
    assert "status" not in d3 and "creationTimestamp" not in d3["metadata"]


def test_secret_and_configmap_bytes_are_base64() -> None:
    s = decode_object(_pb("secret"))
    assert s["data"] == {"pass": "czNjcjN0", "user": "YWRtaW4="}
    assert "type" not in s  # kubectl leaves it to the server's defaulting
    cm = decode_object(_pb("configmap_files"))
    assert cm["data"] == {"greeting.txt": "hello\n"}
    assert len(cm["binaryData"]["blob"]) == 400  # 300 random bytes, base64


def test_service_ports_int_or_string() -> None:
    svc = decode_object(_pb("service_nodeport"))
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"] == [
        {"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080, "nodePort": 30080}
    ]


def test_ingress_pointer_strings() -> None:
    ing = decode_object(_pb("ingress"))
    assert ing["spec"]["ingressClassName"] == "nginx"
    paths = [p for r in ing["spec"]["rules"] for p in r["http"]["paths"]]
    assert {p["pathType"] for p in paths} == {"Prefix", "Exact"}
    assert {"service": {"name": "svc2", "port": {"name": "http"}}} in [p["backend"] for p in paths]


def test_rich_pod_spec() -> None:
    """`kubectl debug --copy-to` re-encodes a stored pod: quantities, probes, volumes, pointer zeros."""
    pod = decode_object(_pb("pod_debug_copy_rich"))
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "1Gi"}
    assert c["livenessProbe"]["httpGet"]["port"] == "http"
    assert c["readinessProbe"]["tcpSocket"]["port"] == 8080
    assert c["securityContext"]["runAsUser"] == 0 and c["securityContext"]["runAsNonRoot"] is False
    assert c["env"][1] == {"name": "EMPTY"}
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["scratch"] == {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}
    assert vols["sec"]["secret"]["defaultMode"] == 0
    assert vols["hp"]["hostPath"] == {"path": "/var/log", "type": ""}
    assert pod["spec"]["tolerations"][0]["tolerationSeconds"] == 0
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_resourcequota_from_kubectl_decodes() -> None:
    # kubectl create quota's body: every kind kube v1.32 serves has its tables (it once had none)
    assert decode_object(_pb("unknown_kind_resourcequota")) == {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q1"},
        "spec": {"hard": {"cpu": "2", "pods": "10"}}}


def test_unknown_kind_is_400() -> None:
    _bad(envelope("example.com/v1", "Widget", meta("w")), "Widget", '"example.com/v1"')


# ---------------------------------------------------------------------------------------- other served kinds


def test_lease_micro_time_and_pointer_zeros() -> None:
    spec = m(
        f(1, ""),  # holderIdentity *string ""
        f(2, 0),  # leaseDurationSeconds *int32 0
        f(3, m(f(1, 1767323045), f(2, 123456789))),  # acquireTime MicroTime
        f(4, m(f(1, 1767323045))),  # renewTime, no nanos
        f(5, 0),  # leaseTransitions *int32 0
    )
    raw = envelope("coordination.k8s.io/v1", "Lease", m(meta("l1", ns=f(3, "kube-system")), f(2, spec)))
    assert decode_object(raw) == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l1", "namespace": "kube-system"},
        "spec": {
            "holderIdentity": "",
            "leaseDurationSeconds": 0,
            "acquireTime": "2026-01-02T03:04:05.123456Z",
            "renewTime": "2026-01-02T03:04:05.000000Z",
            "leaseTransitions": 0,
        },
    }


def test_endpointslice() -> None:
    ep = m(
        f(1, "10.0.0.1"),
        f(1, "10.0.0.2"),
        f(2, m(f(1, False), f(2, True))),  # conditions: ready *bool false, serving true
        f(4, m(f(1, "Pod"), f(3, "p"), f(2, "ns"))),  # targetRef
        f(5, entry("zone", "a")),  # deprecatedTopology map
        f(6, "node-1"),
    )
    port = m(f(1, ""), f(2, "TCP"), f(3, 0))  # name *string "", port *int32 0
    raw = envelope("discovery.k8s.io/v1", "EndpointSlice", m(meta("es"), f(2, ep), f(3, port), f(4, "IPv4")))
    assert decode_object(raw) == {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "es"},
        "addressType": "IPv4",
        "endpoints": [
            {
                "addresses": ["10.0.0.1", "10.0.0.2"],
                "conditions": {"ready": False, "serving": True},
                "targetRef": {"kind": "Pod", "namespace": "ns", "name": "p"},
                "deprecatedTopology": {"zone": "a"},
                "nodeName": "node-1",
            }
        ],
        "ports": [{"name": "", "protocol": "TCP", "port": 0}],
    }


def test_core_event_time_drops_nanos_and_non_omitempty_strings() -> None:
    body = m(
        meta("e1", creationTimestamp=f(8, b"")),  # zero Time: present but empty -> null -> dropped
        f(2, m(f(1, "Pod"), f(3, "p"))),
        f(3, "Started"),
        f(6, m(f(1, 1767323045), f(2, 999))),  # firstTimestamp (metav1.Time drops nanos)
        f(7, m(f(2, 5))),  # lastTimestamp seconds=0 -> the Unix epoch, not zero time
        f(8, 2),
        f(9, "Normal"),
        f(10, b""),  # eventTime MicroTime zero -> dropped
    )
    assert decode_object(envelope("v1", "Event", body)) == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p"},
        "reason": "Started",
        "firstTimestamp": "2026-01-02T03:04:05Z",
        "lastTimestamp": "1970-01-01T00:00:00Z",
        "count": 2,
        "type": "Normal",
        "reportingComponent": "",  # json:"reportingComponent" has no omitempty: Go writes ""
        "reportingInstance": "",
    }


def test_events_v1_event() -> None:
    body = m(
        meta("e2"),
        f(2, m(f(1, 1767323045), f(2, 1000))),
        f(3, m(f(1, 0), f(2, m(f(1, 1767323046))))),  # series: count has no omitempty
        f(4, "ctrl"),
        f(7, "Why"),
        f(8, m(f(1, "Node"), f(3, "n1"))),
        f(10, "note"),
        f(15, 0),  # deprecatedCount omitempty 0
    )
    assert decode_object(envelope("events.k8s.io/v1", "Event", body)) == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "e2"},
        "eventTime": "2026-01-02T03:04:05.000001Z",
        "series": {"count": 0, "lastObservedTime": "2026-01-02T03:04:06.000000Z"},
        "reportingController": "ctrl",
        "reason": "Why",
        "regarding": {"kind": "Node", "name": "n1"},
        "note": "note",
    }


def test_ingress_class_json_names_differ_from_proto_names() -> None:
    # IngressClassParametersReference field 1 is `aPIGroup` in the .proto but `apiGroup` in JSON
    params = m(f(1, "k.example.com"), f(2, "Params"), f(3, "p"), f(4, "Cluster"))
    raw = envelope(
        "networking.k8s.io/v1", "IngressClass", m(meta("nginx"), f(2, m(f(1, "x/y"), f(2, params))))
    )
    assert decode_object(raw)["spec"] == {
        "controller": "x/y",
        "parameters": {"apiGroup": "k.example.com", "kind": "Params", "name": "p", "scope": "Cluster"},
    }


def test_statefulset() -> None:
    pvc = m(
        meta("data"),
        f(2, m(f(1, "ReadWriteOnce"), f(2, m(f(2, entry("storage", m(f(1, "1Gi")))))), f(5, ""))),
        f(3, b""),  # empty PVC status
    )
    tmpl = m(f(1, m(f(11, entry("app", "db")))), f(2, m(f(2, m(f(1, "db"), f(2, "postgres"))))))
    spec = m(
        f(1, 2),
        f(2, m(f(1, entry("app", "db")))),
        f(3, tmpl),
        f(4, pvc),
        f(5, "db"),
        f(7, m(f(1, "RollingUpdate"), f(2, m(f(1, 0), f(2, m(f(1, 1), f(3, "25%"))))))),
        f(10, m(f(1, "Retain"), f(2, "Delete"))),
    )
    raw = envelope("apps/v1", "StatefulSet", m(meta("db"), f(2, spec), f(3, b"")))
    assert decode_object(raw) == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "db", "image": "postgres"}]},
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                        "storageClassName": "",
                    },
                    "status": {},
                }
            ],
            "serviceName": "db",
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"partition": 0, "maxUnavailable": "25%"},
            },
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Delete"},
        },
        # StatefulSetStatus.replicas / availableReplicas have no omitempty: Go's encoder writes the zeros,
        # so only a fully empty top-level status is dropped.
        "status": {"replicas": 0, "availableReplicas": 0},
    }


@pytest.mark.parametrize("api_version", ["v1", "meta.k8s.io/v1", "apps/v1"])
def test_delete_options(api_version: str) -> None:
    body = m(f(1, 0), f(2, m(f(1, "uid-1"))), f(4, "Foreground"), f(5, "All"))
    assert decode_object(envelope(api_version, "DeleteOptions", body)) == {
        "apiVersion": api_version,
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": "uid-1"},
        "propagationPolicy": "Foreground",
        "dryRun": ["All"],
    }


def test_wire_details() -> None:
    """Negative varints, packed repeated, unknown fields, managedFields, map entry without value."""
    sc = m(f(4, _varint(1) + _varint(2)), f(4, 3))  # supplementalGroups packed, then unpacked
    mf = m(
        f(1, "kubectl"),
        f(2, "Update"),
        f(4, m(f(1, 1767323045))),
        f(6, "FieldsV1"),
        f(7, f(1, b'{"f:metadata":{}}')),
    )
    spec = m(f(2, m(f(1, "c"))), f(14, sc), f(25, -5), f(99, "unknown field"), f(100, 7))
    raw = envelope("v1", "Pod", m(meta("p", lb=f(11, m(f(1, "k"))), mf=f(17, mf)), f(2, spec)))
    assert decode_object(raw) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "labels": {"k": ""},
            "managedFields": [
                {
                    "manager": "kubectl",
                    "operation": "Update",
                    "time": "2026-01-02T03:04:05Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {}},
                }
            ],
        },
        "spec": {
            "containers": [{"name": "c"}],
            "securityContext": {"supplementalGroups": [1, 2, 3]},
            "priority": -5,
        },
    }


def test_int_or_string_and_quantity_edge_cases() -> None:
    def svc_port(target: bytes) -> bytes:
        return envelope("v1", "Service", m(meta("s"), f(2, m(f(1, m(f(3, 80), f(4, target)))))))

    assert decode_object(svc_port(b""))["spec"]["ports"] == [{"port": 80, "targetPort": 0}]
    assert decode_object(svc_port(m(f(1, 1), f(3, ""))))["spec"]["ports"][0]["targetPort"] == ""
    _bad(svc_port(m(f(1, 2))), "IntOrString")

    def pod_limits(q: bytes) -> bytes:
        res = f(8, m(f(1, entry("cpu", q))))
        return envelope("v1", "Pod", m(meta("p"), f(2, m(f(2, m(f(1, "c"), res))))))

    assert decode_object(pod_limits(b""))["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "0"}}
    assert (
        decode_object(pod_limits(f(1, "1.5e3")))["spec"]["containers"][0]["resources"]["limits"]["cpu"]
        == "1.5e3"
    )
    _bad(pod_limits(f(1, "lots")), "quantities must match")


def test_go_duration() -> None:
    assert go_duration(0) == "0s"
    assert go_duration(1) == "1ns"
    assert go_duration(1500) == "1.5µs"
    assert go_duration(1_500_000) == "1.5ms"
    assert go_duration(90 * 10**9) == "1m30s"
    assert go_duration(3600 * 10**9) == "1h0m0s"
    assert go_duration(-(10**9 + 5 * 10**8)) == "-1.5s"


# ---------------------------------------------------------------------------------------- malformed bodies


def test_bad_magic_and_empty() -> None:
    _bad(b"", "magic")
    _bad(b"k8s", "magic")
    _bad(b'{"kind": "Namespace"}', "magic")
    _bad(b"k8s\x01" + _pb("namespace")[4:], "magic")


def test_envelope_errors() -> None:
    ns = m(meta("x"))
    _bad(b"k8s\x00", "no kind")
    _bad(b"k8s\x00" + f(2, ns), "no kind")
    _bad(envelope("", "Namespace", ns), "no apiVersion")
    _bad(envelope("v1", "Namespace", ns, f(3, "gzip")), "contentEncoding")
    _bad(envelope("v1", "Namespace", ns, f(4, "application/json")), "contentType")
    _bad(envelope("v1", "Frobnicator", ns), '"Frobnicator"')
    _bad(envelope("apps/v1", "Namespace", ns), "Namespace")  # wrong group for the kind
    assert decode_object(envelope("v1", "Namespace", ns, f(4, protobuf.CONTENT_TYPE)))["metadata"] == {
        "name": "x"
    }


def test_wrong_wire_types_and_bad_embedded_json() -> None:
    _bad(envelope("v1", "Namespace", f(1, 5)), "wire type")  # metadata as a varint
    _bad(envelope("v1", "Namespace", f(1, f(1, 5))), "wire type")  # name as a varint
    _bad(envelope("v1", "Namespace", f(1, f(7, "x"))), "wire type")  # generation as bytes
    _bad(envelope("v1", "Namespace", f(1, f(17, f(7, f(1, b"{not json"))))), "not JSON")
    _bad(b"k8s\x00" + bytes([0x0B]), "wire type")  # group start
    _bad(b"k8s\x00" + bytes([0x02, 0x01]), "field number")  # field 0


def test_every_truncation_is_a_400() -> None:
    raw = _pb("deployment_replicas3")
    for n in range(len(raw)):
        try:
            decode_object(raw[:n])
        except ApiError as e:
            assert e.code == 400
    _bad(raw[:-1])
    _bad(raw[: len(raw) // 2])


def test_invalid_utf8_is_replaced_like_go_json() -> None:
    assert (
        decode_object(envelope("v1", "Namespace", meta("a\xff".encode("latin-1"))))["metadata"]["name"]
        == "a\ufffd"
    )


def test_accepts_bytearray_and_memoryview() -> None:
    raw = _pb("namespace")
    assert decode_object(bytearray(raw)) == decode_object(memoryview(raw)) == decode_object(raw)  # type: ignore[arg-type]


def _only_400(raw: bytes) -> None:
    try:
        out = decode_object(raw)
    except ApiError as e:
        assert e.code == 400
    else:
        assert isinstance(out, dict) and out["kind"]
        json.dumps(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data: bytes) -> None:
    _only_400(data)
    _only_400(b"k8s\x00" + data)
    _only_400(envelope("v1", "Pod", data))
    _only_400(envelope("apps/v1", "Deployment", data))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL_PB), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4))
def test_fuzz_mutated_fixtures(path: Path, edits: list[tuple[int, int]]) -> None:
    raw = bytearray(path.read_bytes())
    for pos, byte in edits:
        raw[4 + pos % (len(raw) - 4)] = byte
    _only_400(bytes(raw))


# ---------------------------------------------------------------------------------------- generated tables


def test_tables_are_consistent() -> None:
    names = [n for n, _ in MESSAGES]
    assert len(set(names)) == len(names)
    for _name, fields in MESSAGES:
        for num, (jname, typ, flags) in fields.items():
            assert num > 0
            assert (
                (isinstance(typ, int)
                and 0 <= typ < len(MESSAGES))
                or typ in ("string", "bytes", "int32", "int64", "bool")
            )
            assert bool(jname) != bool(flags & INLINE)
            assert not (flags & MAP and flags & REPEATED)
    for key, idx in ROOTS.items():
        assert MESSAGES[idx][0].rsplit(".", 1)[1] == key.rsplit("/", 1)[1]
