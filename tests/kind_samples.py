"""A valid create and update of every kind x scope of the one resource table
(:data:`gpuaas.model.api_kinds.KINDS`), on the world :func:`build_world` makes; shared by the
SDK tests (tests/client) and the CLI tests (tests/cli).

A kind or scope added to the table without a sample here fails :func:`sample_for`, so the
kind x verb tests cannot silently skip it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuaas.client import Client
from gpuaas.model.api_kinds import KINDS, ApiKind

TENANT = "acme"
POOL = {"gpuaas.io/pool": "kinds"}


def quota(gpus: int) -> dict[str, Any]:
    """A ClusterQueue or Cohort spec holding ``gpus`` H100s."""
    return {
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "h100",
                        "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                    }
                ],
            }
        ]
    }


def profile(display: str, allowed: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "displayName": display,
        "localQueue": "default",
        "resources": [{"name": "nvidia.com/gpu", "min": "1", "default": "1", "max": "4"}],
    }
    if allowed:
        spec["allowedTenants"] = allowed
    return spec


def build_world(admin: Client) -> None:
    """A flavor, tenant acme (16 H100s) with its ClusterQueue acme-cq (8) and LocalQueue default."""
    admin.create_flavor("h100", {"nodeLabels": POOL})
    admin.create_tenant(TENANT, capacity={"h100": {"nvidia.com/gpu": 16}})
    admin.create_cluster_queue("acme-cq", {"namespaceSelector": {}, **quota(8)}, owner=TENANT)
    admin.create_local_queue("default", "acme-cq", tenant=TENANT)


@dataclass(frozen=True)
class Sample:
    """The name to use, the SDK fields of a create and of an update, and where the update
    shows in the object read back (a dotted path of its JSON) with the value it must have."""

    name: str
    create: dict[str, Any]
    update: dict[str, Any]
    shows: tuple[str, Any]


SAMPLES: dict[tuple[str, str], Sample] = {
    ("ResourceFlavor", "provider"): Sample(
        "a100",
        {"spec": {"nodeLabels": {"gpuaas.io/pool": "a"}}},
        {"spec": {"nodeLabels": {"gpuaas.io/pool": "b"}}},
        ("spec.nodeLabels", {"gpuaas.io/pool": "b"}),
    ),
    ("Cohort", "provider"): Sample(
        "shared",
        {"spec": {}},
        {"spec": quota(4)},
        ("spec.resourceGroups.0.flavors.0.resources.0.nominalQuota", 4),
    ),
    ("Cohort", "tenant"): Sample(
        "acme-team",
        {"spec": {}},
        {"spec": quota(2)},
        ("spec.resourceGroups.0.flavors.0.resources.0.nominalQuota", 2),
    ),
    ("ClusterQueue", "provider"): Sample(
        "spare-cq",
        {"spec": quota(4)},
        {"spec": quota(6)},
        ("spec.resourceGroups.0.flavors.0.resources.0.nominalQuota", 6),
    ),
    ("ClusterQueue", "tenant"): Sample(
        "acme-extra-cq",
        {"spec": quota(2)},
        {"spec": quota(3)},
        ("spec.resourceGroups.0.flavors.0.resources.0.nominalQuota", 3),
    ),
    ("LocalQueue", "tenant"): Sample(
        "batch",
        {"cluster_queue": "acme-cq"},
        {"cluster_queue": "acme-cq", "user_limit": 3},
        ("userLimit", 3),
    ),
    ("WorkloadPriorityClass", "provider"): Sample(
        "high", {"value": 100}, {"value": 200, "description": "urgent"}, ("value", 200)
    ),
    ("WorkloadPriorityClass", "tenant"): Sample(
        "acme-high", {"value": 50}, {"value": 60}, ("value", 60)
    ),
    ("HardwareProfile", "provider"): Sample(
        "h100-small",
        {"spec": profile("small", [TENANT])},
        {"spec": profile("smaller", [TENANT])},
        ("spec.displayName", "smaller"),
    ),
    ("HardwareProfile", "tenant"): Sample(
        "acme-own",
        {"spec": profile("own")},
        {"spec": profile("own, renamed")},
        ("spec.displayName", "own, renamed"),
    ),
    ("Volume", "tenant"): Sample(
        "acme-data", {"size": "1Mi"}, {"size": "2Mi"}, ("sizeBytes", 2 << 20)
    ),
    ("Dataset", "tenant"): Sample(
        "imagenet",
        {"uri": "s3://datasets/imagenet", "size": "150Gi"},
        {"uri": "s3://datasets/imagenet", "size": "150Gi", "runtime": "juicefs"},
        ("runtime", "juicefs"),
    ),
    ("IdlePool", "provider"): Sample(
        "spot",
        {"owner": "marketplace", "marketplace": "nvcf", "grace_seconds": 45},
        {"owner": "marketplace", "marketplace": "nvcf", "grace_seconds": 60},
        ("graceSeconds", 60.0),
    ),
    ("Budget", "tenant"): Sample(
        "acme-month",
        {"amount": "100", "thresholds": "50,80,100"},
        {"amount": "250.5", "thresholds": "50,80,100", "hard": "true"},
        ("amount", "250.5"),
    ),
    ("Price", "provider"): Sample(
        "h100-2026",
        {"sku": "H100-80GB/whole@on-demand", "list_per_hour": "2.49", "valid_from": "1700000000"},
        {"sku": "H100-80GB/whole@on-demand", "list_per_hour": "2.19", "valid_from": "1700000000"},
        ("listPerHour", "2.19"),
    ),
    ("Price", "tenant"): Sample(
        "acme-h100",
        {"sku": "H100-80GB/whole@on-demand", "list_per_hour": "3", "valid_from": "1700000000"},
        {
            "sku": "H100-80GB/whole@on-demand",
            "list_per_hour": "3.5",
            "currency": "EUR",
            "valid_from": "1700000000",
        },
        ("currency", "EUR"),
    ),
}

#: every kind x scope of the table, as test parameters
KIND_SCOPES: list[tuple[ApiKind, str]] = [(k, s) for k in KINDS for s in k.scopes]


def kind_scope_id(param: Any) -> str:
    return param.cli if isinstance(param, ApiKind) else str(param)


def sample_for(kind: ApiKind, scope: str) -> Sample:
    sample = SAMPLES.get((kind.kind, scope))
    assert sample is not None, f"no sample for {kind.kind} ({scope}) in tests/kind_samples.py"
    return sample


def dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def api_fields(kind: ApiKind, fields: dict[str, Any]) -> dict[str, Any]:
    """SDK fields (snake_case) as the API's JSON names: a document for ``-f``."""
    names = {f.python: f.api for f in kind.fields}
    return {names[k]: v for k, v in fields.items()}
