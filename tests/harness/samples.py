"""Sample inputs shared by tests: kubeadm's Corefile (from tests/unit/test_coredns.py) and the seed's
dklb-config example (from tests/unit/test_lb_config.py)."""

from __future__ import annotations

# kubeadm v1.32's default (cmd/kubeadm/app/phases/addons/dns), as `kubectl get cm coredns` shows it.
KUBEADM = """.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
"""

SEED_EXAMPLE = """\
name: "foo"
role: "foo_lb"
network: "foo_network"
cpus: 0.2
memory: 256
size: 3
strategies:
  creation: "IfNotPresent"
frontends:
- port: 10254
  servicePort: 80
- port: 23674
  servicePort: 8080
"""
