"""RDMA pods, the provider's SR-IOV objects for a NIC pool, and Fluid datasets as Kubernetes
objects: validated against ../shared/schemas (network/, fluid/, core) strictly, with golden
files (GPUAAS_UPDATE_GOLDEN=1 rewrites them)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from k8s_kinds import DATASETS, KINDS, RDMA_NODES

from gpuaas.backends.kubernetes import manifests as m
from gpuaas.backends.kubernetes.fluid import dataset_objects, dataset_volume, mount_point
from gpuaas.backends.kubernetes.network import (
    NETWORKS_ANNOTATION,
    attachment_name,
    network_objects,
)
from gpuaas.backends.kubernetes.schemas import validate
from gpuaas.model.dataset import CacheRuntime, Dataset
from gpuaas.model.errors import InvalidValue
from gpuaas.supply.loaders.kubernetes import load_kubernetes_nodes

SCHEMAS = Path(__file__).resolve().parents[3] / ".." / "shared" / "schemas"
GOLDEN = Path(__file__).parent / "golden"
UPDATE = bool(os.environ.get("GPUAAS_UPDATE_GOLDEN"))
RDMA_FLEET = Path(__file__).resolve().parents[2] / "fixtures" / "kubectl-get-nodes-rdma.yaml"
needs_schemas = pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"{SCHEMAS} is absent")
GI = 1 << 30


def _golden(name: str, objects: list[dict]) -> None:
    text = yaml.safe_dump_all(objects, sort_keys=False)
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.write_text(text)
        if not UPDATE:
            pytest.fail(f"{path.name} was missing and is written now; check it in")
    assert text == path.read_text(), f"{path.name} drifted (GPUAAS_UPDATE_GOLDEN=1 rewrites)"


def _fleet() -> list:
    return load_kubernetes_nodes(RDMA_FLEET).nodes


def _pod(obj: dict, pod_set: int = 0) -> dict:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][pod_set]["template"]["spec"]["template"]
    return obj["spec"]["template"]


def test_an_rdma_gang_asks_one_vf_per_gpu_on_the_tenants_attachment() -> None:
    (job,) = m.render(KINDS["rdma-gang"]())
    pod = _pod(job)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "8", "nvidia.com/rdma_ib": "8"}
    networks = pod["metadata"]["annotations"][NETWORKS_ANNOTATION].split(",")
    assert networks == ["gpuaas-acme-rdma-ib"] * 8
    assert attachment_name("nvidia.com/rdma_ib", "gpuaas-acme") == "gpuaas-acme-rdma-ib"


def test_a_pod_set_without_a_pool_takes_the_placed_nics_pool() -> None:
    options = m.ManifestOptions(nodes=RDMA_NODES)
    (job,) = m.render(KINDS["rdma-multi"](), options)
    workers = _pod(job, 1)
    assert workers["spec"]["containers"][0]["resources"]["limits"]["openshift.io/mlnx_roce"] == (
        "2"
    )
    assert workers["metadata"]["annotations"][NETWORKS_ANNOTATION] == (
        "acme-net/roce-a,acme-net/roce-a"
    )
    assert NETWORKS_ANNOTATION not in _pod(job, 0)["metadata"].get("annotations", {})
    with pytest.raises(InvalidValue, match="no pool named") as caught:
        m.render(KINDS["rdma-multi"]())  # the nodes are not known: the pool cannot be
    assert caught.value.field == "podSets[1].network.pool"
    unplaced = replace(KINDS["rdma-multi"](), pods=())
    with pytest.raises(InvalidValue, match="no pool named"):
        m.render(unplaced, options)


def test_one_vf_per_gpu_needs_whole_gpus() -> None:
    job = KINDS["fractional"]()
    job.spec["podSets"][0]["network"] = {"pool": "nvidia.com/rdma_ib", "perGpu": True}
    with pytest.raises(InvalidValue, match="no whole GPU") as caught:
        m.render(job)
    assert caught.value.field == "podSets[0].network.perGpu"


def test_a_dataset_job_mounts_the_fluid_pvc_of_a_registered_dataset() -> None:
    job = KINDS["dataset"]()
    (obj,) = m.render(job, m.ManifestOptions(datasets=DATASETS))
    pod = _pod(obj)["spec"]
    assert pod["volumes"] == [
        {"name": "dataset-imagenet-1k",
         "persistentVolumeClaim": {"claimName": "imagenet-1k", "readOnly": True}}
    ]  # fmt: skip
    assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == "/datasets/imagenet-1k"
    job.spec["dataset"]["mountPath"] = "/data"
    (obj,) = m.render(job)  # datasets not given: mounted unchecked
    assert _pod(obj)["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == "/data"
    with pytest.raises(InvalidValue, match="no dataset 'imagenet-1k'") as caught:
        m.render(job, m.ManifestOptions(datasets={}))
    assert caught.value.field == "dataset.name"
    assert dataset_volume({"name": "Big_Set"}, None)[0]["persistentVolumeClaim"] == {
        "claimName": "big-set", "readOnly": True
    }  # fmt: skip


@needs_schemas
@pytest.mark.parametrize("pool", ["nvidia.com/rdma_ib", "openshift.io/mlnx_roce"])
def test_sriov_objects_for_a_pool(pool: str) -> None:
    fleet = _fleet()
    if pool == "openshift.io/mlnx_roce":  # the annotation-less node: give its PF an address
        node = next(n for n in fleet if n.name == "hgx-h200-07")
        node.nics = [
            replace(nic, pci_address="0000:3b:00.0") if nic.pool == pool else nic
            for nic in node.nics
        ]
    objects = network_objects(pool, fleet, ["gpuaas-acme", "gpuaas-globex"],
                              ipam={"type": "whereabouts", "range": "10.56.0.0/16"})  # fmt: skip
    validate(objects, SCHEMAS)
    policy, *networks = objects
    assert policy["kind"] == "SriovNetworkNodePolicy"
    name = pool.partition("/")[2]
    assert policy["spec"]["resourceName"] == name
    selector = policy["spec"]["nodeSelector"]
    assert [n.name for n in fleet if all(n.labels.get(k) == v for k, v in selector.items())] == [
        "dgx-h100-01" if "ib" in pool else "hgx-h200-07"
    ]
    if "ib" in pool:
        assert policy["spec"]["linkType"] == "ib" and policy["spec"]["numVfs"] == 4
        assert len(policy["spec"]["nicSelector"]["rootDevices"]) == 8
        assert {n["kind"] for n in networks} == {"SriovIBNetwork"}
    else:
        assert policy["spec"]["linkType"] == "eth" and policy["spec"]["isRdma"] is True
        assert {n["kind"] for n in networks} == {"SriovNetwork"}
    assert [n["metadata"]["name"] for n in networks] == [
        attachment_name(pool, "gpuaas-acme"), attachment_name(pool, "gpuaas-globex")
    ]  # fmt: skip
    assert [n["spec"]["networkNamespace"] for n in networks] == ["gpuaas-acme", "gpuaas-globex"]
    _golden(f"sriov-{name.replace('_', '-')}.yaml", objects)


@needs_schemas
def test_a_shared_rdma_pool_gets_attachments_not_sriov_objects() -> None:
    objects = network_objects("rdma/rdma_shared_device_a", _fleet(), ["gpuaas-acme"])
    validate(objects, SCHEMAS)
    (nad,) = objects
    assert nad["kind"] == "NetworkAttachmentDefinition"
    assert nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] == (
        "rdma/rdma_shared_device_a"
    )
    assert json.loads(nad["spec"]["config"])["type"] == "macvlan"  # RoCE
    _golden("rdma-shared-attachment.yaml", objects)


@pytest.mark.parametrize(
    ("pool", "field", "problem"),
    [
        ("nvidia.com/rdma_roce", "pool", "no node offers NIC pool nvidia.com/rdma_roce"),
        ("rdma_ib", "pool", "domain/name"),
        ("openshift.io/mlnx_roce", "nics.pciAddress", "has no pciAddress"),
    ],
)
def test_network_objects_refuse_what_cannot_be_made(pool: str, field: str, problem: str) -> None:
    with pytest.raises(InvalidValue, match=problem) as caught:
        network_objects(pool, _fleet(), ["gpuaas-acme"])
    assert caught.value.field == field


def test_nodes_no_label_sets_apart_are_refused() -> None:
    fleet = _fleet()
    twin = replace(fleet[0], name="dgx-h100-02", nics=[])
    twin.labels = {**fleet[0].labels, "kubernetes.io/hostname": "dgx-h100-02"}
    with pytest.raises(InvalidValue, match="share no labels that set them apart from dgx-h100-02"):
        network_objects("nvidia.com/rdma_ib", [*fleet, twin], ["gpuaas-acme"])


@needs_schemas
@pytest.mark.parametrize("runtime", list(CacheRuntime))
def test_fluid_objects_for_every_runtime(runtime: CacheRuntime) -> None:
    dataset = replace(DATASETS["imagenet-1k"], runtime=runtime)
    objects = dataset_objects(dataset, "gpuaas-acme", nodes=["h100-003", "h100-001"])
    validate(objects, SCHEMAS)
    kinds = [o["kind"] for o in objects]
    assert kinds[0] == "Dataset" and kinds[2] == "DataLoad"
    assert kinds[1] == {"alluxio": "AlluxioRuntime", "juicefs": "JuiceFSRuntime",
                        "jindo": "JindoRuntime", "thin": "ThinRuntime"}[runtime.value]  # fmt: skip
    assert {o["metadata"]["name"] for o in objects[:2]} == {"imagenet-1k"}
    load = objects[2]["spec"]
    assert load["dataset"] == {"name": "imagenet-1k", "namespace": "gpuaas-acme"}
    pinned = load["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert pinned["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "h100-001", "h100-003"
    ]  # fmt: skip
    if runtime is CacheRuntime.ALLUXIO:
        assert objects[1]["spec"]["tieredstore"]["levels"][0]["quota"] == "200Gi"
        assert objects[1]["spec"]["replicas"] == 2
        _golden("fluid-alluxio.yaml", objects)


def test_fluid_mount_points_by_scheme() -> None:
    def point(uri: str) -> str:
        return mount_point(Dataset("d", "acme", uri, 1))

    assert point("s3://bucket/x") == "s3://bucket/x"
    assert point("hdfs://nn:8020/data") == "hdfs://nn:8020/data"
    assert point("nfs://filer/export") == "pvc://d"
    assert point("/data/x") == "local:///data/x" == point("file:///data/x")
    with pytest.raises(InvalidValue, match="unknown scheme 'gs'") as caught:
        point("gs://bucket/x")
    assert caught.value.field == "uri"
    assert len(dataset_objects(Dataset("d", "acme", "s3://b/", 1), "ns", preload=False)) == 2
