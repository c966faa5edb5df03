"""Kueue's own sample files (tests/fixtures/kueue-samples, see its README for the upstream
path and commit of each) load, or are refused naming the field gpuaas does not support."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaas.model.errors import InvalidValue
from gpuaas.supply.kueue import load_yaml

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-samples"

#: sample -> None (loads) or (the refused field, as the error names it; a word of the problem)
EXPECTED: dict[str, tuple[str, str] | None] = {
    "main/admin/single-clusterqueue-setup.yaml": None,
    "main/admin/shared-quota-setup.yaml": None,
    "main/admin/resource-flavor-empty.yaml": None,
    "main/admin/resource-flavor-taints.yaml": None,
    "main/admin/resource-flavor-tolerations.yaml": None,
    "main/admin/minimal-cq.yaml": (
        "ClusterQueue cluster-queue-2: spec.admissionChecksStrategy",
        "not supported by gpuaas",
    ),
    "main/admin/concurrent-admission-setup.yaml": (
        "ClusterQueue team-cluster-queue: spec.concurrentAdmissionPolicy",
        "not supported by gpuaas",
    ),
    "main/admission-fs/admission-fair-sharing-setup.yaml": (
        "ClusterQueue cluster-queue: spec.admissionScope",
        "not supported by gpuaas",
    ),
    "main/dra/sample-dra-queues.yaml": None,
    "main/getting-started/quick-start-setup.yaml": None,
    "main/getting-started/quick-start-job.yaml": (
        "Job sample-job: apiVersion",
        "Job is not a Kueue governance object",
    ),
    "main/multikueue/multikueue-setup.yaml": (
        "ClusterQueue cluster-queue: spec.admissionChecksStrategy",
        "not supported by gpuaas",
    ),
    "main/multikueue/tas/worker-setup.yaml": None,
    "main/provisioning/provisioning-setup.yaml": (
        "ClusterQueue cluster-queue: spec.admissionChecksStrategy",
        "not supported by gpuaas",
    ),
    "main/sample-admission-check.yaml": (
        "AdmissionCheck prov-test: kind",
        "'AdmissionCheck' is not supported (gpuaas has no equivalent",
    ),
    "main/serving-workloads/sample-hami.yaml": (
        "Namespace kueue-test: apiVersion",
        "Namespace is not a Kueue governance object",
    ),
    "main/tas/sample-queues.yaml": None,
    "main/tas/sample-gpu-queues.yaml": None,
    "v0.14.8/admin/single-clusterqueue-setup.yaml": None,
    "v0.14.8/admin/resource-flavor-taints.yaml": None,
    "v0.14.8/admin/minimal-cq.yaml": (
        "ClusterQueue cluster-queue-2: spec.admissionChecksStrategy",
        "not supported by gpuaas",
    ),
    "v0.14.8/admission-fs/admission-fair-sharing-setup.yaml": (
        "ClusterQueue cluster-queue: spec.admissionScope",
        "not supported by gpuaas",
    ),
    "v0.14.8/provisioning/provisioning-setup.yaml": (
        "ClusterQueue cluster-queue: spec.admissionChecksStrategy",
        "not supported by gpuaas",
    ),
    "v0.14.8/tas/sample-queues.yaml": None,
    "v0.14.8/tas/sample-gpu-queues.yaml": None,
    "v0.13.10/tas/sample-queues.yaml": None,
    "v0.13.10/multikueue/multikueue-setup.yaml": (
        "ClusterQueue cluster-queue: spec.admissionChecks",
        "spec.admissionChecks is spec.admissionChecksStrategy in kueue.x-k8s.io/v1beta2",
    ),
}


def test_every_sample_is_listed_here_and_in_the_readme() -> None:
    found = {p.relative_to(SAMPLES).as_posix() for p in SAMPLES.rglob("*.yaml")}
    assert found == set(EXPECTED)
    readme = (SAMPLES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_loads_or_is_refused_naming_the_field(name: str) -> None:
    path = SAMPLES / name
    expected = EXPECTED[name]
    if expected is None:
        gov = load_yaml(path)
        assert gov.flavors or gov.cluster_queues
        return
    field, problem = expected
    with pytest.raises(InvalidValue) as caught:
        load_yaml(path)
    assert caught.value.field.endswith(field), caught.value.field
    assert str(path) in caught.value.field  # the file is named too
    assert problem in caught.value.problem


def test_topology_samples_map_their_levels() -> None:
    for name in ("main", "v0.14.8", "v0.13.10"):
        gov = load_yaml(SAMPLES / name / "tas" / "sample-queues.yaml")
        topology = gov.topologies["default"]
        assert [level.short for level in topology.levels] == ["block", "rack", "hostname"]
        assert gov.flavors["tas-flavor"].topology_name == "default"
    assert load_yaml(SAMPLES / "v0.14.8/tas/sample-queues.yaml") == load_yaml(
        SAMPLES / "main/tas/sample-queues.yaml"
    )
