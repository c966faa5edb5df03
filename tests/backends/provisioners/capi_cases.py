"""The tenant clusters the Cluster API provisioner tests use, one per distribution, and the
golden-file check (``GPUAAS_UPDATE_GOLDEN=1`` rewrites the files, as for the Kubernetes
backend's manifests)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaas.model.cluster import ClusterKind, ClusterNodes, ClusterSpec, Distribution, NodePoolSpec

SCHEMAS = Path(__file__).resolve().parents[3] / ".." / "shared" / "schemas"
#: Not among ../shared/schemas/cluster-api: carried in ./schemas (see its SOURCES.md).
CRS_FILE = "addons.cluster.x-k8s.io_clusterresourcesets.yaml"
CARRIED = Path(__file__).parent / "schemas"
GOLDEN = Path(__file__).parent / "capi_golden"
UPDATE = bool(os.environ.get("GPUAAS_UPDATE_GOLDEN"))
needs_schemas = pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"{SCHEMAS} is absent")

POOLS = (
    NodePoolSpec("h100", count=2, min_count=1, max_count=4, gpu_model="H100"),
    NodePoolSpec("l40s", count=1, flavor="l40s-node"),
)
CREATED = ClusterNodes({"h100": ("gpu-01", "gpu-02"), "l40s": ("gpu-07",)})
#: scale out: h100 to 3 nodes, three control-plane machines
SCALED = ClusterNodes({"h100": ("gpu-01", "gpu-02", "gpu-03"), "l40s": ("gpu-07",)})
#: scale in: gpu-02 released (drained by the service first)
SHRUNK = ClusterNodes({"h100": ("gpu-01", "gpu-03"), "l40s": ("gpu-07",)})


def schema_dir(tmp: Path) -> Path:
    """``../shared/schemas`` with the carried ClusterResourceSet CRD added, as links in ``tmp``
    (the shared folder is read-only and is used unchanged where it has the CRD)."""
    for entry in SCHEMAS.iterdir():
        if entry.name != "cluster-api":
            (tmp / entry.name).symlink_to(entry.resolve())
    capi = tmp / "cluster-api"
    capi.mkdir()
    for entry in (SCHEMAS / "cluster-api").iterdir():
        (capi / entry.name).symlink_to(entry.resolve())
    if not (capi / CRS_FILE).exists():
        (capi / CRS_FILE).symlink_to((CARRIED / CRS_FILE).resolve())
    return tmp


def spec(distribution: Distribution, control_plane: int = 1) -> ClusterSpec:
    return ClusterSpec(
        name="train",
        tenant="acme",
        kind=ClusterKind.KUBERNETES,
        pools=POOLS,
        distribution=distribution,
        control_plane=control_plane,
        ssh_keys=("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyOnly admin@acme",),
    )


def scaled(distribution: Distribution) -> ClusterSpec:
    s = spec(distribution, control_plane=3)
    return replace(s, pools=(replace(POOLS[0], count=3), POOLS[1]))


def check_golden(name: str, documents: list[Any]) -> None:
    text = yaml.safe_dump_all(documents, sort_keys=False)
    assert "&id0" not in text, "an object is shared between two places (a YAML anchor)"
    path = GOLDEN / f"{name}.yaml"
    if UPDATE or not path.exists():
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        if not UPDATE:
            pytest.fail(f"{path.name} was missing and has been written; run again")
    assert text == path.read_text(), f"{path.name} drifted (GPUAAS_UPDATE_GOLDEN=1 rewrites)"
