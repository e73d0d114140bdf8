"""Dual-stack ClusterSet IP CIDRs and IPs in the broker objects: one block per family per cluster,
kube-style messages naming the offending item, every pre-dual-stack object still valid."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from isthmus.api.mcs import (
    BrokerSpec,
    ClusterSpec,
    ExportedServiceSpec,
    ServiceDiscoverySpec,
    cidr_family,
    ip_family,
)


def _message(exc: pytest.ExceptionInfo[ValidationError]) -> str:
    return "; ".join(str(e["msg"]) for e in exc.value.errors())


@pytest.mark.parametrize("model", [ClusterSpec, ServiceDiscoverySpec])
def test_cluster_cidrs_one_per_family(model: type[ClusterSpec] | type[ServiceDiscoverySpec]) -> None:
    both = model.model_validate({"clusterID": "c1", "clustersetIPCIDR": ["fd00:243:0:1::/64", "243.1.0.0/16"]})
    assert both.clusterset_ip_cidr == ["fd00:243:0:1::/64", "243.1.0.0/16"]
    # Unchanged IPv4-only objects stay valid.
    assert model.model_validate({"clusterID": "c1", "clustersetIPCIDR": ["243.1.0.0/16"]}).clusterset_ip_cidr == [
        "243.1.0.0/16"
    ]
    with pytest.raises(ValidationError) as exc:
        model.model_validate({"clusterID": "c1", "clustersetIPCIDR": ["243.1.0.0/16", "243.2.0.0/16"]})
    assert _message(exc) == (
        'Value error, spec.clustersetIPCIDR[1]: Invalid value: "243.2.0.0/16": may specify no more than one '
        'CIDR for each IP family (spec.clustersetIPCIDR[0] is "243.1.0.0/16"), i.e 243.1.0.0/16 and '
        "fd00:243:0:1::/64"
    )
    with pytest.raises(ValidationError) as exc:
        model.model_validate({"clusterID": "c1", "clustersetIPCIDR": ["fd00::/64", "fd01::/64"]})
    assert 'spec.clustersetIPCIDR[1]: Invalid value: "fd01::/64": may specify no more than one' in _message(exc)


@pytest.mark.parametrize(
    ("cidr", "why"),
    [
        ("243.1.0.1/16", 'spec.clustersetIPCIDR[0]: Invalid value: "243.1.0.1/16": must be in canonical form ("243.1.0.0/16")'),
        ("fd00::1/64", 'spec.clustersetIPCIDR[0]: Invalid value: "fd00::1/64": must be in canonical form ("fd00::/64")'),
        ("fd00::/127", 'spec.clustersetIPCIDR[0]: Invalid value: "fd00::/127": an IPv6 prefix length must be at most '
                       "/126 (a block of at least 4 VIPs)"),
        ("fd00:::1/64", 'spec.clustersetIPCIDR[0]: Invalid value: "fd00:::1/64": must be a valid CIDR value, '
                        "(e.g. 10.9.8.0/24 or 2001:db8::/64)"),
    ],
)
def test_cluster_cidr_rejections(cidr: str, why: str) -> None:
    with pytest.raises(ValidationError) as exc:
        ClusterSpec.model_validate({"clusterID": "c1", "clustersetIPCIDR": [cidr]})
    assert _message(exc) == f"Value error, {why}"


@pytest.mark.parametrize("cidr", ["fd00::/129", "243.0.0.0/33", "nope", "243.0.0.0"])
def test_cluster_cidr_bad_shape_fails_the_schema_pattern(cidr: str) -> None:
    with pytest.raises(ValidationError) as exc:
        ClusterSpec.model_validate({"clusterID": "c1", "clustersetIPCIDR": [cidr]})
    assert exc.value.errors()[0]["type"] == "string_pattern_mismatch"


def test_broker_range_keeps_several_ranges_and_adds_ipv6() -> None:
    old = BrokerSpec.model_validate({"clustersetIPCIDRRange": ["10.0.0.0/8", "243.0.0.0/8"]})
    assert old.clusterset_ip_cidr_range == ["10.0.0.0/8", "243.0.0.0/8"]
    dual = BrokerSpec.model_validate({"clustersetIPCIDRRange": ["243.0.0.0/8", "fd00:243::/48"]})
    assert dual.clusterset_ip_cidr_range == ["243.0.0.0/8", "fd00:243::/48"]
    with pytest.raises(ValidationError) as exc:
        BrokerSpec.model_validate({"clustersetIPCIDRRange": ["fd00:243::/130"]})
    assert exc.value.errors()[0]["type"] == "string_pattern_mismatch"


def _export(ips: list[str]) -> dict[str, object]:
    return {
        "cluster": "c1", "serviceName": "web", "serviceNamespace": "ns", "type": "ClusterSetIP", "ports": [],
        "exportCreationTimestamp": datetime(2026, 1, 1, tzinfo=UTC).isoformat(), "clustersetIPs": ips,
    }


def test_exported_service_holds_one_ip_per_family() -> None:
    spec = ExportedServiceSpec.model_validate(_export(["243.1.0.5", "fd00:243:0:1::5"]))
    assert spec.clusterset_ips == ["243.1.0.5", "fd00:243:0:1::5"]
    assert ExportedServiceSpec.model_validate(_export(["243.1.0.5"])).clusterset_ips == ["243.1.0.5"]
    with pytest.raises(ValidationError) as exc:
        ExportedServiceSpec.model_validate(_export(["243.1.0.5", "243.1.0.6"]))
    assert _message(exc) == (
        'Value error, spec.clustersetIPs[1]: Invalid value: "243.1.0.6": may specify no more than one IP for each IP family'
    )
    with pytest.raises(ValidationError):
        ExportedServiceSpec.model_validate(_export(["243.1.0.5", "fd00::5", "fd00::6"]))


def test_families() -> None:
    assert [cidr_family("243.0.0.0/8"), cidr_family("fd00::/48"), cidr_family("x")] == ["IPv4", "IPv6", None]
    assert [ip_family("243.0.0.1"), ip_family("fd00::1"), ip_family("243.0.0.0/8")] == ["IPv4", "IPv6", None]
