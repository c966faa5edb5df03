"""Manifests of every job kind for every target, validated against the upstream schemas in
../shared/schemas (strictly: no unknown field) and, for core kinds, by kubernetes-validate's
1.36 strict schemas; golden files keep the shapes from drifting.

Regenerate the golden files after an intended change with
``GPUAAS_UPDATE_GOLDEN=1 PYTHONPATH=src pytest tests/backends/kubernetes/test_manifests.py``
and read the diff.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from k8s_kinds import DATASETS, DRA_CLAIMS, KINDS, RDMA_NODES

from gpuaas.backends.kubernetes import manifests as m
from gpuaas.backends.kubernetes.schemas import validate
from gpuaas.backends.kubernetes.targets import Target
from gpuaas.model.errors import InvalidValue

SCHEMAS = Path(__file__).resolve().parents[3] / ".." / "shared" / "schemas"
GOLDEN = Path(__file__).parent / "golden"
UPDATE = bool(os.environ.get("GPUAAS_UPDATE_GOLDEN"))


def _options(kind: str, target: Target) -> m.ManifestOptions:
    return m.ManifestOptions(
        target=target,
        claims=DRA_CLAIMS if kind == "dra" else {},
        datasets=DATASETS,
        nodes=RDMA_NODES,
    )


def _render(kind: str, target: Target) -> list[dict]:
    return m.render(KINDS[kind](), _options(kind, target))


needs_schemas = pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"{SCHEMAS} is absent")
CASES = [(k, t) for k in KINDS for t in Target]


@needs_schemas
@pytest.mark.parametrize(("kind", "target"), CASES)
def test_every_object_matches_its_upstream_schema(kind: str, target: Target) -> None:
    objects = _render(kind, target)
    validate(objects, SCHEMAS)


@pytest.mark.parametrize(("kind", "target"), CASES)
def test_core_kinds_pass_kubernetes_validate_strict(kind: str, target: Target) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    for obj in _render(kind, target):
        if obj["apiVersion"] in ("batch/v1", "resource.k8s.io/v1"):
            kv.validate(obj, "1.36.0", strict=True)


@pytest.mark.parametrize(("kind", "target"), CASES)
def test_golden(kind: str, target: Target) -> None:
    text = yaml.safe_dump_all(_render(kind, target), sort_keys=False)
    path = GOLDEN / f"{kind}.{target.value}.yaml"
    if UPDATE or not path.exists():
        path.write_text(text)
        if not UPDATE:
            pytest.fail(f"{path.name} was missing and is written now; check it in")
    assert text == path.read_text(), f"{path.name} drifted (GPUAAS_UPDATE_GOLDEN=1 rewrites)"


@needs_schemas
def test_the_validator_refuses_a_misspelt_field_and_a_wrong_type() -> None:
    job = _render("training-gang", Target.KUEUE)[0]
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(InvalidValue, match="imagePullPolicyy"):
        validate([job], SCHEMAS)
    vc = _render("training-gang", Target.VOLCANO)[0]
    vc["spec"]["minAvailable"] = "all"
    with pytest.raises(InvalidValue, match="minAvailable"):
        validate([vc], SCHEMAS)


def test_every_object_is_labelled_with_tenant_job_and_attempt() -> None:
    for kind, target in CASES:
        for obj in _render(kind, target):
            labels = obj["metadata"]["labels"]
            assert labels[m.MANAGED_BY] == "gpuaas"
            assert labels[m.TENANT] == "acme"
            assert labels[m.JOB_ID] == str(KINDS[kind]().id)
            assert labels[m.ATTEMPT] == str(KINDS[kind]().attempt)
            assert obj["metadata"]["namespace"] == "gpuaas-acme"


def _pod_specs(obj: dict) -> list[dict]:
    if obj["kind"] == "JobSet":
        return [rj["template"]["spec"]["template"] for rj in obj["spec"]["replicatedJobs"]]
    if obj["apiVersion"].startswith("batch.volcano.sh"):
        return [task["template"] for task in obj["spec"]["tasks"]]
    return [obj["spec"]["template"]]


def test_shapes_by_target() -> None:
    gang = {t: _render("training-gang", t)[-1] for t in Target}
    assert (gang[Target.KUEUE]["apiVersion"], gang[Target.KUEUE]["kind"]) == ("batch/v1", "Job")
    kueue = gang[Target.KUEUE]
    assert kueue["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"
    assert kueue["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert kueue["spec"]["suspend"] is True
    assert kueue["spec"]["completionMode"] == "Indexed"
    assert (kueue["spec"]["completions"], kueue["spec"]["parallelism"]) == (4, 4)
    assert kueue["spec"]["activeDeadlineSeconds"] == 86400
    pod = kueue["spec"]["template"]
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == (
        "topology.gpuaas.io/rack"
    )
    volcano = gang[Target.VOLCANO]
    assert volcano["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert volcano["spec"]["minAvailable"] == 4
    assert volcano["spec"]["queue"] == "research"
    assert volcano["spec"]["priorityClassName"] == "high"
    assert _pod_specs(volcano)[0]["spec"]["schedulerName"] == "volcano"
    kai = _pod_specs(gang[Target.KAI])[0]
    assert kai["spec"]["schedulerName"] == "kai-scheduler"
    assert kai["metadata"]["labels"]["kai.scheduler/queue"] == "research"
    multi = {t: _render("multi-pod-set", t)[-1] for t in Target}
    assert multi[Target.KUEUE]["kind"] == "JobSet"
    assert [rj["name"] for rj in multi[Target.KAI]["spec"]["replicatedJobs"]] == [
        "launcher",
        "workers",
    ]
    assert multi[Target.VOLCANO]["spec"]["minAvailable"] == 3
    preferred = _pod_specs(multi[Target.KUEUE])[1]["metadata"]["annotations"]
    assert preferred["kueue.x-k8s.io/podset-preferred-topology"] == "nvidia.com/gpu.clique"


def test_pods_are_pinned_to_their_nodes() -> None:
    gang = _pod_specs(_render("training-gang", Target.KUEUE)[0])[0]["spec"]["affinity"]
    terms = gang["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "h100-001", "h100-002", "h100-003", "h100-004"
    ]  # fmt: skip
    anti = gang["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"][m.POD_SET] == "workers"
    # two pods on one node: pinned to it, no anti-affinity (it would make them unschedulable)
    workers = _pod_specs(_render("multi-pod-set", Target.KUEUE)[0])[1]["spec"]["affinity"]
    assert "podAntiAffinity" not in workers
    plan = json.loads(
        _pod_specs(_render("mig", Target.KAI)[0])[0]["metadata"]["annotations"][m.PLACEMENT]
    )
    assert [p["devices"] for p in plan] == [["gpu-0-mig-1g10gb-0"], ["gpu-0-mig-1g10gb-1"]]


def test_a_job_not_yet_admitted_is_rendered_without_pinning() -> None:
    job = replace(KINDS["training-gang"](), pods=())
    pod = _pod_specs(m.render(job)[0])[0]
    assert "affinity" not in pod["spec"]
    assert m.PLACEMENT not in pod["metadata"].get("annotations", {})


def test_devices_by_target() -> None:
    def resources(kind: str, target: Target) -> dict:
        return _pod_specs(_render(kind, target)[-1])[-1]["spec"]["containers"][0]["resources"]

    assert resources("mig", Target.KUEUE)["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert resources("training-gang", Target.KAI)["limits"] == {"nvidia.com/gpu": "8"}
    assert "limits" not in resources("fractional", Target.KAI)
    kai_pod = _pod_specs(_render("fractional", Target.KAI)[0])[0]
    assert kai_pod["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    assert resources("fractional", Target.VOLCANO)["limits"] == {
        "volcano.sh/vgpu-number": "1",
        "volcano.sh/vgpu-cores": "50",
    }
    assert resources("fractional", Target.KUEUE)["limits"]["nvidia.com/gpucores"] == "50"
    assert resources("inference", Target.KUEUE)["limits"] == {"nvidia.com/gpu.shared": "1"}


def test_dra_claims_become_resource_claim_templates() -> None:
    template, job = _render("dra", Target.KUEUE)
    assert template["kind"] == "ResourceClaimTemplate"
    request = template["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert request["exactly"]["count"] == 2
    assert "productName" in request["exactly"]["selectors"][0]["cel"]["expression"]
    assert template["spec"]["spec"]["devices"]["constraints"][0]["matchAttribute"] == (
        "gpu.nvidia.com/nvlinkDomain"
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    assert pod["containers"][0]["resources"]["claims"] == [{"name": "gpus"}]


def test_non_containerized_runs_in_the_base_image() -> None:
    job = KINDS["non-containerized"]()
    obj = m.render(job, m.ManifestOptions(base_image="registry.local/base:1"))[0]
    container = obj["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.local/base:1"
    assert container["command"] == ["/bin/sh", "-c", "nvidia-smi\necho done"]
    assert obj["spec"]["activeDeadlineSeconds"] == 601
    assert obj["spec"]["backoffLimit"] == 0
    assert obj["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GPUAAS_JOB_ID"] == "106"


def test_names_are_dns_safe() -> None:
    assert m.object_name(7, 3) == "gpuaas-7-3"
    assert m.namespace_of("Acme_Labs", "team-{tenant}") == "team-acme-labs"
    assert m.dns_label("--") == "x"
    assert len(m.dns_label("a" * 100)) == 63


def test_a_job_with_nothing_to_run_is_refused_by_field() -> None:
    job = KINDS["mig"]()
    spec = {k: v for k, v in job.spec.items() if k != "command"}
    with pytest.raises(InvalidValue, match="no container, command, script"):
        m.render(replace(job, spec=spec))
    with pytest.raises(InvalidValue, match="target"):
        Target.parse("slurm")
