"""The About API (KEP-2149, kubernetes-sigs/about-api): `ClusterProperty` (about.k8s.io), and the two
well-known properties Isthmus keeps for a member cluster.

`cluster.clusterset.k8s.io` holds the cluster's ID and `clusterset.k8s.io` the identity of the
clusterset it belongs to, so that any multi-cluster tool can read both without knowing Isthmus.
`isthmus join` writes them, `leave` removes them, and the agent and DNS server refuse to run when the
cluster ID they were given disagrees with the property (docs/clusterset.md).

The kind is another project's API, shipped as upstream defines it (schema, printer columns,
category, the protected-group approval annotation): a copy about-api or another tool installed is
used as it is (api/crdcompat.py).
"""

from __future__ import annotations

from pydantic import Field

from isthmus.api.base import CRDInfo, KubeModel, PrinterColumn, Resource

ABOUT_GROUP = "about.k8s.io"
ABOUT_VERSION = "v1beta1"
"""about-api's storage version (v1alpha1 is still served by upstream's CRD; no v1 exists yet)."""

CLUSTER_ID_PROPERTY = "cluster.clusterset.k8s.io"
"""KEP-2149: the cluster's ID, unique in its clusterset, unchanged for the membership's duration."""
CLUSTERSET_PROPERTY = "clusterset.k8s.io"
"""KEP-2149: which clusterset the cluster belongs to; must not exist while it belongs to none."""

API_APPROVED_ANNOTATION = "api-approved.kubernetes.io"
ABOUT_API_APPROVAL = "https://github.com/kubernetes/enhancements/pull/3084"
"""kube refuses a CRD in a `*.k8s.io` group without an approval annotation; about-api's names its KEP PR."""

WRITTEN_BY_LABEL = "app.kubernetes.io/managed-by"
WRITTEN_BY_VALUE = "isthmus"
"""On a ClusterProperty `join` created: `leave` deletes only what join made (a cluster ID another tool
or the user set before joining stays), and `join --force` may replace only those."""

BROKER_ANNOTATION = "isthmus.io/broker"
"""On `clusterset.k8s.io`: the broker's server and namespace, for people (the value is the Broker's UID)."""


class ClusterPropertySpec(KubeModel):
    """ClusterPropertySpec defines the desired state of ClusterProperty."""

    value: str = Field(min_length=1)
    """ClusterProperty value"""


class ClusterProperty(Resource):
    """ClusterProperty is a resource provides a way to store identification related,
    cluster scoped information for multi-cluster tools while creating flexibility
    for implementations."""

    crd = CRDInfo(
        group=ABOUT_GROUP,
        version=ABOUT_VERSION,
        older_versions=("v1alpha1",),
        kind="ClusterProperty",
        plural="clusterproperties",
        scope="Cluster",
        categories=("multicluster",),
        printer_columns=(
            PrinterColumn("value", "string", ".spec.value"),
            PrinterColumn("age", "date", ".metadata.creationTimestamp"),
        ),
        annotations=((API_APPROVED_ANNOTATION, ABOUT_API_APPROVAL),),
    )

    # Optional in upstream's schema (Go's `omitempty`): a property without one has no value.
    spec: ClusterPropertySpec | None = None
    # No status: upstream's is an empty object (nothing in it survives pruning), and an empty model
    # would come out as x-kubernetes-preserve-unknown-fields, which keeps anything instead.

    @property
    def value(self) -> str | None:
        return self.spec.value if self.spec is not None else None


def clusterset_identity(broker_uid: str) -> str:
    """The value of `clusterset.k8s.io`: the Broker object's UID. Every member reads the same Broker,
    whatever address it reaches the broker at, so the value is the same in each of them; it lives as
    long as the broker does (a broker deployed anew is another clusterset)."""
    return broker_uid


def identity_mismatch(joined: str, property_value: str | None) -> str | None:
    """Why a component must not run with cluster ID `joined` (what join stored in ServiceDiscovery, or
    --cluster-id), or None. An absent property is tolerated: a cluster joined before Isthmus wrote the
    About API has none until `isthmus join` is run again (docs/clusterset.md, upgrading)."""
    if property_value is None or property_value == joined:
        return None
    return (
        f"this cluster's ClusterProperty {CLUSTER_ID_PROPERTY} says its ID is {property_value!r}, but it "
        f"joined the clusterset as {joined!r} (ServiceDiscovery isthmus-system/isthmus): refusing to run under "
        f"two IDs. Either `isthmus leave` and `isthmus join --cluster-id {property_value}`, or, if {joined!r} is "
        f"right, `kubectl delete clusterproperty {CLUSTER_ID_PROPERTY}` and run `isthmus join --cluster-id "
        f"{joined}` again"
    )


ABOUT_MODELS: tuple[type[Resource], ...] = (ClusterProperty,)
"""Every CRD of the About API."""
