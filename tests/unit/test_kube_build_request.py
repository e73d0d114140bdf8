"""kube/transport.py's fast_build_request builds the Request httpx itself would build."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from isthmus.kube.transport import fast_build_request

CASES: list[tuple[str, str, dict[str, Any] | None, bytes | None, dict[str, str] | None, Any]] = [
    ("GET", "/api/v1/namespaces/bulk/services/svc-1", None, None, None, httpx2.USE_CLIENT_DEFAULT),
    ("PATCH", "apis/discovery.k8s.io/v1/namespaces/b/endpointslices/svc-0-c1-0123456789",  # lightkube's form
     {"force": True, "fieldManager": "x"}, b"{}", {"Content-Type": "application/apply-patch+yaml"},
     httpx2.USE_CLIENT_DEFAULT),
    ("POST", "api/v1/namespaces", None, b"{}", None, httpx2.USE_CLIENT_DEFAULT),
    ("GET", "./api", None, None, None, httpx2.USE_CLIENT_DEFAULT),  # normalised: httpx's way
    ("PATCH", "/apis/discovery.k8s.io/v1/namespaces/bulk/endpointslices/svc-1-bulk-c1-0a1b2c3d4e",
     {"fieldManager": "isthmus-mcs-agent", "force": "true"}, b'{"kind":"EndpointSlice"}',
     {"Content-Type": "application/apply-patch+yaml"}, httpx2.USE_CLIENT_DEFAULT),
    ("PATCH", "/apis/multicluster.x-k8s.io/v1beta1/namespaces/b/serviceimports/x/status",
     {"fieldManager": "isthmus-mcs-agent"}, b"{}", {"Content-Type": "application/merge-patch+json"}, 5.0),
    ("GET", "/apis/isthmus.io/v1alpha1/namespaces/isthmus-broker/exportedservices",
     {"labelSelector": "a=b,c in (x,y)", "limit": 500}, None, None, httpx2.Timeout(3, read=None)),
    ("GET", "/api/v1/namespaces", {"watch": "true", "resourceVersion": None}, None, None, None),
    ("GET", "/api/v1/namespaces/a b/pods", None, None, None, httpx2.USE_CLIENT_DEFAULT),  # quoted: httpx's way
    ("GET", "/api/v1/../namespaces", None, None, None, httpx2.USE_CLIENT_DEFAULT),  # normalised: httpx's way
    ("GET", "https://elsewhere.example:6443/api", {}, None, None, httpx2.USE_CLIENT_DEFAULT),
    ("POST", "/api/v1/namespaces/n/events", {}, b"{}", None, httpx2.USE_CLIENT_DEFAULT),
]


@pytest.mark.parametrize("base", ["https://127.0.0.1:6443", "https://[::1]:6443/prefix", "http://Kube.Local"])
@pytest.mark.parametrize(("method", "url", "params", "content", "headers", "timeout"), CASES)
def test_same_request_as_httpx(base: str, method: str, url: str, params: dict[str, Any] | None,
                               content: bytes | None, headers: dict[str, str] | None, timeout: Any) -> None:
    client = httpx2.AsyncClient(base_url=base, headers={"Authorization": "Bearer t"}, timeout=10.0)
    fast = fast_build_request(client)(method, url, params=params, content=content, headers=headers,
                                      timeout=timeout)
    slow = client.build_request(method, url, params=params, content=content, headers=headers, timeout=timeout)
    assert str(fast.url) == str(slow.url)
    assert fast.url == slow.url and fast.url.raw_path == slow.url.raw_path and fast.url.host == slow.url.host
    assert fast.method == slow.method
    assert fast.headers.raw == slow.headers.raw
    assert fast.read() == slow.read()
    assert fast.extensions == slow.extensions


def test_lightkube_paths_take_the_quick_way() -> None:
    client = httpx2.AsyncClient(base_url="https://127.0.0.1:6443")
    slow_calls: list[str] = []
    client.build_request = lambda method, url, **_: slow_calls.append(url)  # type: ignore[assignment,method-assign,misc,return-value]
    build = fast_build_request(client)
    build("PATCH", "apis/discovery.k8s.io/v1/namespaces/b/endpointslices/svc-0-c1-0123456789",
          params={"force": True, "fieldManager": "isthmus-mcs-agent"}, content=b"{}")
    build("GET", "apis/isthmus.io/v1alpha1/namespaces/isthmus-broker/exportedservices",
          params={"labelSelector": "a=b", "limit": 500})
    assert slow_calls == []
    build("GET", "api/v1/namespaces/a b/pods")
    assert slow_calls == ["api/v1/namespaces/a b/pods"]
