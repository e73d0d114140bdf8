"""What test modules share, so that no test module imports another.

- `polling`: `eventually` (and `eventually_passes`, `never`, `eventually_sync`);
- `apiserver`: `RunningApiServer`, a real embedded apiserver (the `apiserver` fixture's);
- `ports`: `free_port`, outside the kernel's ephemeral range;
- `clusterset`: a broker and member clusters with discovery agents in one process, and the
  objects the discovery tests write;
- `backends`: TCP/UDP echo backends for the proxy tests; `proxy`: the Services, slices and
  imports they write;
- `kubelite`, `lb`, `pools`, `egress`, `exposure`: the environments the kube-lite, LB
  translator, pool, egress and exposure tests run in;
- `local`: a local clusterset brought up by `isthmus up` (end-to-end tests);
- `samples`, `monitoring`, `gnostic_proto`: sample inputs, the Grafana dashboard's expressions,
  a decoder for OpenAPI v2 protobuf.

pytest fixtures stay in the `conftest.py` files, where pytest finds them.
"""
