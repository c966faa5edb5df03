"""The simulated fleet's telemetry: every metered device read, idle ones at 0, busy ones from
their job's profile (or the default), the same readings for the same seed."""

from __future__ import annotations

import pytest

from gpuaas.backends.base import BackendJob, TelemetrySource
from gpuaas.backends.sim import SimBackend
from gpuaas.backends.sim_telemetry import DEFAULT_PROFILE, JITTER, LoadProfile, profile_of, reading
from gpuaas.model.devices import GPU
from gpuaas.model.node import Node
from gpuaas.model.placement import DeviceKind, DeviceRef, PodPlacement
from gpuaas.model.telemetry import UtilSource
from gpuaas.supply.partition import partition_gpu

T0 = 1_000.0


def node(name: str = "n1", gpus: int = 2) -> Node:
    devices = [GPU(i, f"GPU-{name}-{i}", "H100-80GB", 81559) for i in range(gpus)]
    return Node(name=name, cpu_milli=64000, memory_bytes=512 << 30, gpus=devices)


def mig_node() -> Node:
    part = partition_gpu("A100-80GB", {"mig": {"3g.40gb": 1, "1g.10gb": 1}})
    return Node(name="m1", cpu_milli=64000, memory_bytes=512 << 30,
                gpus=[GPU(0, "GPU-m1-0", "A100-80GB", 81920, part)])  # fmt: skip


def job(job_id: int, devices: list[DeviceRef], node_name: str = "n1", **spec: object) -> BackendJob:
    pod = PodPlacement("main", 0, 0, node_name, 1000, 1 << 30, tuple(devices))
    return BackendJob(job_id, f"j{job_id}", dict(spec), (pod,))


def whole(i: int) -> DeviceRef:
    return DeviceRef(f"gpu-{i}", f"GPU-n1-{i}", i, DeviceKind.GPU)


def run(backend: SimBackend, *jobs: BackendJob, at: float = T0) -> None:
    for j in jobs:
        backend.launch(j)
    backend.poll(at)


def by_device(samples: list) -> dict[tuple[str, str], float]:
    return {(s.node, s.device): s.util for s in samples}


def test_the_sim_backend_is_a_telemetry_source() -> None:
    assert isinstance(SimBackend(), TelemetrySource)


def test_idle_devices_read_zero_and_busy_ones_their_profile() -> None:
    b = SimBackend()
    b.observe_fleet([node()])
    run(b, job(1, [whole(0)], utilization={"gpu": 60, "memory": 25}))
    samples = b.samples(T0 + 10)
    utils = by_device(samples)
    assert set(utils) == {("n1", "gpu-0"), ("n1", "gpu-1")}
    assert utils[("n1", "gpu-1")] == 0.0
    assert abs(utils[("n1", "gpu-0")] - 0.6) <= JITTER
    busy = next(s for s in samples if s.device == "gpu-0")
    assert busy.memory_total_bytes == 81559 << 20
    assert busy.memory_used_bytes == int(0.25 * (81559 << 20))
    assert busy.source is UtilSource.SYNTHETIC and busy.at == T0 + 10


def test_a_job_without_a_profile_reads_the_default() -> None:
    b = SimBackend()
    b.observe_fleet([node()])
    run(b, job(1, [whole(1)]))
    assert abs(by_device(b.samples(T0 + 1))[("n1", "gpu-1")] - DEFAULT_PROFILE.gpu) <= JITTER
    assert profile_of({}) == DEFAULT_PROFILE


def test_the_same_seed_reads_the_same_and_another_seed_differs() -> None:
    def readings(seed: int) -> list[float]:
        b = SimBackend(seed=seed)
        b.observe_fleet([node()])
        run(b, job(3, [whole(0), whole(1)], utilization={"gpu": 50, "amplitude": 30, "period": 60}))
        return [s.util for t in range(0, 120, 7) for s in b.samples(T0 + t)]

    assert readings(1) == readings(1)
    assert readings(1) != readings(2)


def test_a_varying_load_swings_by_its_amplitude() -> None:
    profile = LoadProfile(gpu=0.5, memory=0.1, amplitude=0.3, period=100)
    values = [reading(profile, 0, 1, "gpu-0", t) for t in range(0, 200)]
    assert max(values) == pytest.approx(0.8, abs=JITTER + 0.01)
    assert min(values) == pytest.approx(0.2, abs=JITTER + 0.01)


def test_mig_instances_are_read_each_and_shared_gpus_sum_their_jobs() -> None:
    b = SimBackend()
    b.observe_fleet([mig_node(), node()])
    mig = DeviceRef("gpu-0-mig-1g10gb-4", "MIG-x", 0, DeviceKind.MIG, 0)
    half = DeviceRef("gpu-1", "GPU-n1-1", 1, DeviceKind.SHARE, 500)
    run(
        b,
        job(1, [mig], node_name="m1", utilization={"gpu": 90}),
        job(2, [half], utilization={"gpu": 40}),
        job(3, [half], utilization={"gpu": 60}),
    )
    utils = by_device(b.samples(T0 + 5))
    assert set(utils) >= {("m1", "gpu-0-mig-3g40gb-0"), ("m1", "gpu-0-mig-1g10gb-4")}
    assert ("m1", "gpu-0") not in utils  # a MIG GPU is read per instance
    assert utils[("m1", "gpu-0-mig-3g40gb-0")] == 0.0
    assert abs(utils[("m1", "gpu-0-mig-1g10gb-4")] - 0.9) <= JITTER
    assert abs(utils[("n1", "gpu-1")] - 0.5) <= JITTER  # 0.5 x 40 % + 0.5 x 60 %


def test_a_finished_job_leaves_its_devices_idle() -> None:
    b = SimBackend()
    b.observe_fleet([node()])
    run(b, job(1, [whole(0)], duration=10, utilization={"gpu": 70}))
    assert by_device(b.samples(T0 + 5))[("n1", "gpu-0")] > 0.5
    b.poll(T0 + 11)
    assert by_device(b.samples(T0 + 12))[("n1", "gpu-0")] == 0.0
