"""What the simulated fleet's devices read: utilisation synthesised from each job's profile.

A job may declare how busy it keeps its devices (the job spec's ``utilization``: ``gpu`` and
``memory`` in percent, and optionally a load that varies, ``amplitude`` percent around ``gpu``
over ``period`` seconds of job time). A running job that declares nothing reads
:data:`DEFAULT_PROFILE` (80 % busy, 50 % of memory). A device no job holds reads 0.

A reading at job time ``t`` is ``gpu + amplitude * sin(2 pi t / period + phase)`` plus a
jitter of at most ``JITTER`` either way, clipped to 0..100 %; ``phase`` and the jitter come
from a random generator seeded by (``seed``, job id, device, the sample's second), so the same
seed gives the same readings, call after call and run after run, and tests can rely on them.
A GPU shared by several jobs (time-slicing, MPS, milli-GPU shares) reads the sum of its jobs'
readings, each weighted by its share of the GPU, capped at 100 %.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuaas.model.node import Node
from gpuaas.model.placement import DeviceKind, PodPlacement
from gpuaas.model.telemetry import DeviceSample, UtilSource
from gpuaas.supply.telemetry import MeteredDevice, metered_devices, metered_name

#: Jitter either way, as a fraction of the device's time.
JITTER = 0.02


@dataclass(frozen=True, slots=True)
class LoadProfile:
    """Fractions 0..1 (the spec says percent); ``period`` in seconds of job time (0: flat)."""

    gpu: float
    memory: float
    amplitude: float = 0.0
    period: float = 0.0


DEFAULT_PROFILE = LoadProfile(gpu=0.8, memory=0.5)


def profile_of(spec: Mapping[str, Any]) -> LoadProfile:
    """The profile a stored job spec declares (validated at submission), else the default."""
    raw = spec.get("utilization")
    if not isinstance(raw, Mapping):
        return DEFAULT_PROFILE
    return LoadProfile(
        gpu=float(raw.get("gpu", DEFAULT_PROFILE.gpu * 100)) / 100,
        memory=float(raw.get("memory", DEFAULT_PROFILE.memory * 100)) / 100,
        amplitude=float(raw.get("amplitude", 0)) / 100,
        period=float(raw.get("period", 0)),
    )


def reading(profile: LoadProfile, seed: int, job_id: int, device: str, job_time: float) -> float:
    """One device's utilisation 0..1 at ``job_time`` seconds into the job (deterministic)."""
    rng = random.Random(f"{seed}/{job_id}/{device}/{math.floor(job_time)}")
    value = profile.gpu
    if profile.period > 0 and profile.amplitude > 0:
        phase = random.Random(f"{seed}/{job_id}/phase").random() * 2 * math.pi
        value += profile.amplitude * math.sin(2 * math.pi * job_time / profile.period + phase)
    value += (rng.random() * 2 - 1) * JITTER
    return min(max(value, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class Holder:
    """A running job on a metered device: its id, profile, when it started (wall time) and
    its weight on the device (1 for a whole GPU or MIG instance, its share of a shared GPU)."""

    job_id: int
    profile: LoadProfile
    started_at: float
    weight: float


class Synthesiser:
    """The simulated fleet's telemetry: told the fleet's nodes and who runs where, it reads
    every metered device at the time it is asked."""

    def __init__(self, seed: int = 0, time_scale: float = 1.0) -> None:
        self.seed = seed
        self.time_scale = time_scale
        self._devices: dict[str, list[MeteredDevice]] = {}
        self._replicas: dict[tuple[str, int], int] = {}

    def set_nodes(self, nodes: Iterable[Node]) -> None:
        nodes = list(nodes)
        self._devices = {n.name: metered_devices(n) for n in nodes}
        self._replicas = {(n.name, g.index): g.partition.replicas for n in nodes for g in n.gpus}

    def samples(self, now: float, runs: Iterable[Run]) -> list[DeviceSample]:
        """Every metered device of the fleet read at ``now``; ``runs`` are the running jobs."""
        holders = holders_of(runs, self._replicas)
        out: list[DeviceSample] = []
        for node, devices in self._devices.items():
            for d in devices:
                util = 0.0
                memory = 0.0
                for h in holders.get((node, d.name), ()):
                    t = max(now - h.started_at, 0.0) * self.time_scale
                    util += h.weight * reading(h.profile, self.seed, h.job_id, d.name, t)
                    memory += h.weight * h.profile.memory
                out.append(
                    DeviceSample(node, d.name, now, min(util, 1.0),
                                 int(min(memory, 1.0) * d.memory_bytes), d.memory_bytes,
                                 UtilSource.SYNTHETIC)
                )  # fmt: skip
        return out


def weight(kind: DeviceKind, milli: int, replicas: int) -> float:
    """A pod device's share of the metered device it reads."""
    if kind is DeviceKind.SHARE:
        return milli / 1000
    if kind is DeviceKind.REPLICA:
        return 1 / max(replicas, 1)
    return 1.0


#: A running job as the synthesiser reads it: id, spec, start (wall time), typed pods.
Run = tuple[int, Mapping[str, Any], float, Iterable[PodPlacement]]


def holders_of(
    runs: Iterable[Run],
    replicas_of: Mapping[tuple[str, int], int],
) -> dict[tuple[str, str], list[Holder]]:
    """Who runs on which metered device: ``runs`` are (job id, spec, started, pods)."""
    out: dict[tuple[str, str], list[Holder]] = {}
    for job_id, spec, started, pods in runs:
        profile = profile_of(spec)
        for pod in pods:
            for ref in pod.devices:
                name = metered_name(ref)
                if name is None:
                    continue
                w = weight(ref.kind, ref.milli, replicas_of.get((pod.node, ref.gpu), 1))
                out.setdefault((pod.node, name), []).append(Holder(job_id, profile, started, w))
    return out
