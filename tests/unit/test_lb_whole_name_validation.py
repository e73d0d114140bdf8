"""Validation regexes match whole strings (issue 40, item 3): Python's `$` also matches before a
trailing newline, so `"abcd\n"` passed every `^...$` check of lb, haproxy and egress."""

from __future__ import annotations

import pytest

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION, ConfigError, is_pool_name, parse_service_config
from isthmus.egress import admission as egress_admission
from isthmus.haproxy.config import PoolConfigError, proxy_name


@pytest.mark.parametrize("name", ["abcd\n", "abcd\r\n", "\nabcd", "ab\ncd"])
def test_a_pool_name_with_a_line_break_is_refused(name: str) -> None:
    assert not is_pool_name(name)
    with pytest.raises(ConfigError, match="is not a valid pool name"):
        parse_service_config({DKLB_CONFIG_ANNOTATION: f"name: {name!r}\n".replace("'", '"')})


def test_valid_pool_names_still_pass() -> None:
    assert is_pool_name("abcd") and is_pool_name("a") and is_pool_name("kube-one--default--web")
    assert not is_pool_name("a" * 64) and not is_pool_name("-a") and not is_pool_name("A")


def test_an_haproxy_proxy_name_with_a_trailing_newline_is_refused() -> None:
    assert proxy_name("c:ns:svc:80") == "c:ns:svc:80"
    with pytest.raises(PoolConfigError, match="not a valid HAProxy proxy name"):
        proxy_name("c:ns:svc:80\n")


def test_egress_names_with_a_trailing_newline_are_refused() -> None:
    es = {"metadata": {"name": "db\n", "namespace": "shop"},
          "spec": {"targetIP": "127.0.0.9", "sources": [{"service": {"name": "web"}, "sourceIPClaimName": "lab\n"}]}}
    fields = dict(egress_admission.validate_external_service(es, lambda _ns, _name: True))
    assert "metadata.name" in fields and "DNS-1035" in fields["metadata.name"]
    assert "spec.sources[0].sourceIPClaimName" in fields
