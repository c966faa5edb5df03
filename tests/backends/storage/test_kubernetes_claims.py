"""Kubernetes volumes: a volume's PersistentVolumeClaim and a job that mounts it, validated
against the core schemas in ../shared/schemas (strictly) and kept in golden files.

Regenerate after an intended change with ``GPUAAS_UPDATE_GOLDEN=1`` and read the diff."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaas.backends.base import BackendJob
from gpuaas.backends.kubernetes import manifests as m
from gpuaas.backends.kubernetes.schemas import validate
from gpuaas.backends.provisioners.base import ProvisionError
from gpuaas.backends.storage.kubernetes import PersistentVolumeClaims
from gpuaas.model.cluster import AccessMode, VolumeSpec
from gpuaas.model.placement import PodPlacement
from gpuaas.model.volume import Volume, VolumeState

SCHEMAS = Path(__file__).resolve().parents[3] / ".." / "shared" / "schemas"
GOLDEN = Path(__file__).parent / "golden"
UPDATE = bool(os.environ.get("GPUAAS_UPDATE_GOLDEN"))
needs_schemas = pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"{SCHEMAS} is absent")

VOLUME = Volume("acme", VolumeSpec("checkpoints", 100 << 30, "fast-ssd", AccessMode.RWX), "c1")


def job_mounting() -> BackendJob:
    spec: dict[str, Any] = {
        "name": "train",
        "queue": "research",
        "command": ["python", "train.py"],
        "podSets": [{"name": "main", "count": 1}],
        "volumes": [
            {"name": "checkpoints", "mountPath": "/ckpt", "readOnly": False},
            {"name": "datasets", "mountPath": "/data", "readOnly": True},
        ],
        "resolved": {
            "queue": "acme/research",
            "podSets": [{"name": "main", "count": 1, "requests": {"cpu": 4000}}],
            "volumes": [
                {"name": "checkpoints", "mountPath": "/ckpt", "readOnly": False,
                 "storageClass": "fast-ssd", "path": "", "claim": "checkpoints"},
                {"name": "datasets", "mountPath": "/data", "readOnly": True,
                 "storageClass": "nfs", "path": "/mnt/gpuaas/acme/datasets", "claim": ""},
            ],
        },
    }  # fmt: skip
    pod = PodPlacement("main", 0, 0, "node-1", 4000, 0, ())
    return BackendJob(7, "train", spec, (pod,), None, 0, "acme")


def rendered() -> dict[str, list[dict[str, Any]]]:
    claims = PersistentVolumeClaims("fast-ssd")
    return {
        "pvc.yaml": list(claims.manifest(VOLUME)),
        "job-with-volumes.yaml": m.render(job_mounting()),
    }


@needs_schemas
def test_the_claim_and_the_job_match_the_core_schemas() -> None:
    for objects in rendered().values():
        validate(objects, SCHEMAS)


@pytest.mark.parametrize("name", ["pvc.yaml", "job-with-volumes.yaml"])
def test_golden(name: str) -> None:
    text = yaml.safe_dump_all(rendered()[name], sort_keys=False)
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text


def test_the_job_mounts_the_claim_and_the_directory() -> None:
    (job,) = m.render(job_mounting())
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "vol-checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints"}},
        {"name": "vol-datasets",
         "hostPath": {"path": "/mnt/gpuaas/acme/datasets", "type": "Directory"}},
    ]  # fmt: skip
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "vol-checkpoints", "mountPath": "/ckpt"},
        {"name": "vol-datasets", "mountPath": "/data", "readOnly": True},
    ]


class FakeCore:
    """The few CoreV1Api calls the claims make, against a dict of claims."""

    def __init__(self, phase: str = "Pending") -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.phase = phase

    def create_namespaced_persistent_volume_claim(self, ns: str, body: dict) -> dict:
        key = (ns, body["metadata"]["name"])
        if key in self.claims:
            raise _ApiError(409)
        self.claims[key] = {**body, "status": {"phase": self.phase}}
        return self.claims[key]

    def read_namespaced_persistent_volume_claim(self, name: str, ns: str) -> dict:
        if (ns, name) not in self.claims:
            raise _ApiError(404)
        return self.claims[(ns, name)]

    def patch_namespaced_persistent_volume_claim(self, name: str, ns: str, patch: dict) -> dict:
        claim = self.claims[(ns, name)]
        claim["spec"]["resources"] = patch["spec"]["resources"]
        return claim

    def delete_namespaced_persistent_volume_claim(self, name: str, ns: str) -> None:
        if self.claims.pop((ns, name), None) is None:
            raise _ApiError(404)


class _ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def claims_with(core: FakeCore) -> PersistentVolumeClaims:
    claims = PersistentVolumeClaims("fast-ssd", client=lambda: None)
    claims._core = lambda: core  # type: ignore[method-assign]
    return claims


def test_a_claim_is_pending_until_bound_then_ready_and_grows_by_patch() -> None:
    core = FakeCore()
    claims = claims_with(core)
    made = claims.provision(VOLUME)
    assert made.state is VolumeState.PENDING and made.claim == "checkpoints"
    core.claims[("gpuaas-acme", "checkpoints")]["status"]["phase"] = "Bound"
    assert claims.observe(VOLUME, made).state is VolumeState.READY
    bigger = Volume("acme", VolumeSpec("checkpoints", 200 << 30, "fast-ssd", AccessMode.RWX), "c1")
    assert claims.provision(bigger).state is VolumeState.READY  # adopted, patched
    stored = core.claims[("gpuaas-acme", "checkpoints")]
    assert stored["spec"]["resources"]["requests"]["storage"] == str(200 << 30)
    claims.delete(bigger)
    claims.delete(bigger)  # already gone: fine
    assert core.claims == {}


def test_a_claim_gpuaas_did_not_make_is_left_alone() -> None:
    core = FakeCore()
    core.claims[("gpuaas-acme", "checkpoints")] = {"metadata": {"labels": {}}, "spec": {}}
    with pytest.raises(ProvisionError, match="did not make"):
        claims_with(core).provision(VOLUME)


def test_without_a_cluster_the_claim_is_only_rendered() -> None:
    made = PersistentVolumeClaims("fast-ssd").provision(VOLUME)
    assert made.state is VolumeState.PENDING and made.reason.code.value == "ClaimRendered"
    assert made.details["manifest"]["kind"] == "PersistentVolumeClaim"
