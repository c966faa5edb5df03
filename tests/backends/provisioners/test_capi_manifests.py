"""The Cluster API documents of a tenant Kubernetes cluster, for each distribution: every
object validates against the upstream CRDs (../shared/schemas/cluster-api, strictly: an unknown
field is refused), replica counts follow scaling, the host selectors stay stable while the
hosts change, and golden files keep the shapes from drifting. Regenerate them after an
intended change with
``GPUAAS_UPDATE_GOLDEN=1 PYTHONPATH=src pytest tests/backends/provisioners/test_capi_manifests.py``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from capi_cases import (
    CREATED,
    SCALED,
    check_golden,
    needs_schemas,
    scaled,
    schema_dir,
    spec,
)
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.backends.kubernetes.schemas import validate
from gpuaas.backends.provisioners.capi import ClusterApiProvisioner
from gpuaas.backends.provisioners.capi_manifests import (
    CONTROL_PLANE_POOL,
    HOSTS_ANNOTATION,
    CapiOptions,
    documents,
)
from gpuaas.model.cluster import ClusterKind, ClusterNodes, Distribution
from gpuaas.model.errors import InvalidValue

CONTROL_PLANES = {
    Distribution.UPSTREAM: ("KubeadmControlPlane", "KubeadmConfigTemplate"),
    Distribution.RANCHER: ("RKE2ControlPlane", "RKE2ConfigTemplate"),
    Distribution.OPENSHIFT: ("OpenshiftAssistedControlPlane", "OpenshiftAssistedConfigTemplate"),
}


def _docs(distribution: Distribution, scale: bool = False) -> list[dict]:
    provisioner = ClusterApiProvisioner()  # no kubeconfig: documents only
    if scale:
        return list(provisioner.manifest(scaled(distribution), SCALED, {}))
    return list(provisioner.manifest(spec(distribution), CREATED, {}))


def _by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared schemas plus the ClusterResourceSet CRD the tests carry."""
    return schema_dir(tmp_path_factory.mktemp("schemas"))


@needs_schemas
@pytest.mark.parametrize("distribution", list(Distribution))
@pytest.mark.parametrize("scale", [False, True], ids=["create", "scale"])
def test_every_object_matches_its_upstream_schema(
    distribution: Distribution, scale: bool, schemas: Path
) -> None:
    docs = _docs(distribution, scale)
    assert _by_kind(docs, "ClusterResourceSet")  # the add-ons are among them
    validate(docs, schemas)


@pytest.mark.parametrize("distribution", list(Distribution))
@pytest.mark.parametrize("scale", [False, True], ids=["create", "scale"])
def test_golden(distribution: Distribution, scale: bool) -> None:
    check_golden(
        f"{distribution.value}.{'scale' if scale else 'create'}", _docs(distribution, scale)
    )


@pytest.mark.parametrize("distribution", list(Distribution))
def test_the_objects_of_each_distribution_and_their_replicas(distribution: Distribution) -> None:
    control_plane, bootstrap = CONTROL_PLANES[distribution]
    for docs, cp_replicas, h100 in ((_docs(distribution), 1, 2), (_docs(distribution, True), 3, 3)):
        kinds = [d["kind"] for d in docs]
        assert kinds.count("Cluster") == 1 and kinds[-1] == "Cluster"  # last: refs exist first
        assert kinds.count("Metal3Cluster") == 1
        assert [d["spec"]["replicas"] for d in _by_kind(docs, control_plane)] == [cp_replicas]
        mds = {d["metadata"]["name"]: d for d in _by_kind(docs, "MachineDeployment")}
        assert {n: d["spec"]["replicas"] for n, d in mds.items()} == {
            "acme-train-h100": h100,
            "acme-train-l40s": 1,
        }
        names = {(d["kind"], d["metadata"]["name"]) for d in docs}
        for md in mds.values():  # each pool: its bootstrap template and machine template exist
            template = md["spec"]["template"]["spec"]
            assert template["bootstrap"]["configRef"]["kind"] == bootstrap
            assert (bootstrap, template["bootstrap"]["configRef"]["name"]) in names
            assert ("Metal3MachineTemplate", template["infrastructureRef"]["name"]) in names
        cluster = docs[-1]
        assert cluster["spec"]["controlPlaneRef"]["kind"] == control_plane
        assert ("Metal3Cluster", cluster["spec"]["infrastructureRef"]["name"]) in names


def test_host_selectors_are_stable_and_the_hosts_are_listed() -> None:
    """Scaling must not change a Metal3MachineTemplate (that would reprovision every machine
    of the pool); only replicas and the hosts annotation move."""
    before, after = _docs(Distribution.UPSTREAM), _docs(Distribution.UPSTREAM, True)
    for kind in ("Metal3MachineTemplate", "KubeadmConfigTemplate", "Metal3Cluster"):
        assert _by_kind(before, kind) == _by_kind(after, kind)
    md = {d["metadata"]["name"]: d for d in _by_kind(after, "MachineDeployment")}["acme-train-h100"]
    assert md["metadata"]["annotations"][HOSTS_ANNOTATION] == "gpu-01,gpu-02,gpu-03"
    selector = {d["metadata"]["name"]: d for d in _by_kind(after, "Metal3MachineTemplate")}[
        "acme-train-h100"
    ]["spec"]["template"]["spec"]["hostSelector"]
    assert selector == {
        "matchLabels": {
            "gpuaas.io/tenant": "acme",
            "gpuaas.io/cluster": "train",
            "gpuaas.io/pool": "h100",
        }
    }


def test_a_carved_control_plane_pool_pins_the_control_plane() -> None:
    nodes = ClusterNodes({**CREATED.pools, CONTROL_PLANE_POOL: ("cp-1",)})
    docs = documents(spec(Distribution.RANCHER), nodes, CapiOptions())
    assert [d["metadata"]["name"] for d in _by_kind(docs, "MachineDeployment")] == [
        "acme-train-h100",
        "acme-train-l40s",
    ]
    cp = {d["metadata"]["name"]: d for d in _by_kind(docs, "Metal3MachineTemplate")}[
        "acme-train-control-plane"
    ]
    assert (
        cp["spec"]["template"]["spec"]["hostSelector"]["matchLabels"]["gpuaas.io/pool"]
        == "control-plane"
    )
    with pytest.raises(InvalidValue, match="controlPlane"):
        documents(spec(Distribution.RANCHER, control_plane=3), nodes, CapiOptions())


def test_the_addons_select_this_cluster_only() -> None:
    for scheduler, addons in (
        ("kueue", ["gpu-operator", "kueue"]),
        ("kai", ["gpu-operator", "kai"]),
        ("volcano", ["gpu-operator", "volcano"]),
        ("", ["gpu-operator"]),
    ):
        docs = documents(spec(Distribution.UPSTREAM), CREATED, CapiOptions(scheduler=scheduler))
        (crs,) = _by_kind(docs, "ClusterResourceSet")
        assert [r["name"] for r in crs["spec"]["resources"]] == [
            f"gpuaas-addon-{a}" for a in addons
        ]
        labels = docs[-1]["metadata"]["labels"]
        assert crs["spec"]["clusterSelector"]["matchLabels"].items() <= labels.items()
    with pytest.raises(InvalidValue, match="scheduler"):
        CapiOptions(scheduler="slurm")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"distribution": None}, "distribution"),
        ({"kind": ClusterKind.SLURM}, "kind"),
        ({"name": "Train_1"}, "name"),
        ({"tenant": "acme corp"}, "tenant"),
        ({"control_plane": 2}, "controlPlane"),
        ({"control_plane": 0}, "controlPlane"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(change: dict, field: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        documents(replace(spec(Distribution.UPSTREAM), **change), CREATED, CapiOptions())
    assert caught.value.field == field


@needs_schemas
@given(
    distribution=st.sampled_from(list(Distribution)),
    counts=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    control_plane=st.sampled_from([1, 3, 5]),
)
def test_any_size_validates_and_replicas_equal_the_hosts(
    schemas: Path, distribution: Distribution, counts: list[int], control_plane: int
) -> None:
    nodes = ClusterNodes(
        {f"p{i}": tuple(f"n{i}-{j}" for j in range(c)) for i, c in enumerate(counts)}
    )
    docs = documents(spec(distribution, control_plane), nodes, CapiOptions())
    validate(docs, schemas)
    replicas = {
        d["metadata"]["name"]: d["spec"]["replicas"] for d in _by_kind(docs, "MachineDeployment")
    }
    assert replicas == {f"acme-train-p{i}": c for i, c in enumerate(counts)}
