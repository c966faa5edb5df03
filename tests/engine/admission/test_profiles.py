"""Hardware profiles: defaults filled in, bounds enforced, tenants and queues checked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.engine.admission import AdmissionEngine, profile_requests, profile_workload
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import HardwareProfile, ResourceRange
from gpuaas.supply.kueue import load_objects

GIB = 2**30


def objects(profile_spec: dict[str, object]) -> list[dict[str, object]]:
    k = "kueue.x-k8s.io/v1beta2"
    return [
        {"apiVersion": k, "kind": "ResourceFlavor", "metadata": {"name": "h100"}},
        {
            "apiVersion": k,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h100",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "64"},
                                    {"name": "memory", "nominalQuota": "512Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "8"},
                                ],
                            }
                        ],
                    }
                ]
            },
        },
        *(
            {
                "apiVersion": k,
                "kind": "LocalQueue",
                "metadata": {"name": "gpu", "namespace": ns},
                "spec": {"clusterQueue": "cq"},
            }
            for ns in ("team-a", "team-b")
        ),
        {
            "apiVersion": "gpuaas.io/v1",
            "kind": "HardwareProfile",
            "metadata": {"name": "h100-small"},
            "spec": profile_spec,
        },
    ]


SPEC: dict[str, object] = {
    "displayName": "1x H100, up to 32 cores",
    "localQueue": "gpu",
    "allowedTenants": ["team-a"],
    "resources": [
        {"name": "nvidia.com/gpu", "min": "1", "default": "1", "max": "4"},
        {"name": "cpu", "min": "1", "default": "8", "max": "32"},
        {"name": "memory", "min": "8Gi", "default": "64Gi"},
    ],
}


def test_defaults_are_filled_and_overrides_kept() -> None:
    gov = load_objects(objects(SPEC))
    profile = gov.hardware_profiles["h100-small"]
    assert profile.display_name == "1x H100, up to 32 cores"
    assert profile_requests(profile) == {"nvidia.com/gpu": 1, "cpu": 8000, "memory": 64 * GIB}
    assert profile_requests(profile, {"cpu": "16", "memory": "1Ti"}) == {
        "nvidia.com/gpu": 1,
        "cpu": 16_000,
        "memory": 1024 * GIB,  # no max for memory
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cpu": "64"}, "hardware profile h100-small: cpu: 64 is above the maximum 32"),
        ({"cpu": "500m"}, "hardware profile h100-small: cpu: 500m is below the minimum 1"),
        ({"nvidia.com/gpu": 0}, "nvidia.com/gpu: 0 GPUs is below the minimum 1 GPU"),
        ({"example.com/fpga": 1}, "example.com/fpga: not offered by this profile"),
        ({"cpu": "lots"}, "hardware profile h100-small: cpu"),
    ],
)
def test_bounds_are_enforced_with_a_clear_error(overrides: dict[str, str], message: str) -> None:
    profile = load_objects(objects(SPEC)).hardware_profiles["h100-small"]
    with pytest.raises(InvalidValue, match=message):
        profile_requests(profile, overrides)


@given(st.integers(0, 40))
def test_requests_always_within_bounds(cpu: int) -> None:
    profile = HardwareProfile(
        "p", "P", "gpu", (ResourceRange("cpu", 1000, 8000, 32000),), ("team-a",)
    )
    try:
        got = profile_requests(profile, {"cpu": cpu})
    except InvalidValue:
        assert not 1 <= cpu <= 32
    else:
        assert 1000 <= got["cpu"] <= 32000 and got["cpu"] == cpu * 1000


def test_workload_goes_to_the_tenants_local_queue_and_is_admitted() -> None:
    gov = load_objects(objects(SPEC))
    wl = profile_workload(gov, "h100-small", "team-a", "train", count=2, overrides={"cpu": "4"})
    assert wl.queue == "team-a/gpu"
    assert wl.pod_sets[0].requests == {"nvidia.com/gpu": 1, "cpu": 4000, "memory": 64 * GIB}
    engine = AdmissionEngine(gov)
    engine.submit(wl)
    engine.run(0)
    assert engine.admitted["train"].usage[("h100", "nvidia.com/gpu")] == 2


def test_tenant_not_allowed_and_unknown_profile_are_refused() -> None:
    gov = load_objects(objects(SPEC))
    with pytest.raises(InvalidValue, match="tenant team-b may not use hardware profile"):
        profile_workload(gov, "h100-small", "team-b", "w")
    with pytest.raises(InvalidValue, match="HardwareProfile 'nope' does not exist"):
        profile_workload(gov, "nope", "team-a", "w")


def test_no_allowed_tenants_means_any_namespace_with_the_queue() -> None:
    gov = load_objects(objects({**SPEC, "allowedTenants": []}))
    assert profile_workload(gov, "h100-small", "team-b", "w").queue == "team-b/gpu"
    with pytest.raises(InvalidValue, match="tenant team-c has no LocalQueue gpu"):
        profile_workload(gov, "h100-small", "team-c", "w")


def res(i: int, **fields: str) -> dict[str, object]:
    base = dict(SPEC["resources"][i])  # type: ignore[index]
    base.update(fields)
    return base


@pytest.mark.parametrize(
    ("spec", "field", "problem"),
    [
        (
            {**SPEC, "resources": [res(1, default="64")]},
            r"spec\.resources\[0\]\.default",
            "default 64000 is above max 32000",
        ),
        (
            {**SPEC, "resources": [res(1, min="16", default="16", max="8")]},
            r"spec\.resources\[0\]\.max",
            "max 8000 is below min 16000",
        ),
        (
            {**SPEC, "resources": [res(1, default="500m")]},
            r"spec\.resources\[0\]\.default",
            "below min",
        ),
        (
            {**SPEC, "allowedTenants": ["team-a", "team-z"]},
            r"spec\.localQueue",
            "LocalQueue team-z/gpu does not exist for allowed tenant team-z",
        ),
        ({**SPEC, "localQueue": "nowhere"}, r"spec\.localQueue", "team-a/nowhere does not exist"),
        (
            {**SPEC, "allowedTenants": [], "localQueue": "nowhere"},
            r"spec\.localQueue",
            "no namespace has a LocalQueue 'nowhere'",
        ),
        ({**SPEC, "resources": []}, r"spec\.resources", "at least one resource"),
        ({**SPEC, "resources": [res(1), res(1)]}, r"spec\.resources\[1\]\.name", "listed twice"),
        ({**SPEC, "nodeSelector": {"a": "b"}}, r"spec\.nodeSelector", "not supported"),
        ({**SPEC, "resources": [res(1, step="1")]}, r"spec\.resources\[0\]\.step", "not supported"),
        ({k: v for k, v in SPEC.items() if k != "localQueue"}, r"spec\.localQueue", "required"),
        ({**SPEC, "resources": [{"name": "cpu", "min": "1"}]}, r"\.default", "required"),
        ({**SPEC, "resources": [res(1, min="-1")]}, r"\.min", "negative"),
    ],
)
def test_bad_profiles_name_the_object_and_field(
    spec: dict[str, object], field: str, problem: str
) -> None:
    with pytest.raises(InvalidValue, match=rf"HardwareProfile h100-small.*{field}.*{problem}"):
        load_objects(objects(spec), "profiles.yaml")


def test_unknown_gpuaas_kind_and_top_level_field_are_rejected() -> None:
    objs = objects(SPEC)
    objs[-1] = {**objs[-1], "kind": "GpuProfile"}
    with pytest.raises(InvalidValue, match=r"'GpuProfile' is not a gpuaas\.io/v1 kind"):
        load_objects(objs)
    objs = objects(SPEC)
    objs[-1] = {**objs[-1], "status": {}}
    with pytest.raises(InvalidValue, match="status"):
        load_objects(objs)
