"""GPU telemetry: what a device did, sampled, as dcgm-exporter reports it.

A sample is one reading of one device at one time. ``device`` uses the one device naming the
API shows for a pod's devices (``gpu-3``, ``gpu-3-mig-1g10gb-4``, ``gpu-3-ts-1``); ``util``
is the fraction of the time the device's graphics engine was busy, 0..1. On a MIG instance
``DCGM_FI_DEV_GPU_UTIL`` reads 0, so the source says which field a reading came from:
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` where the exporter has it, else ``DCGM_FI_DEV_GPU_UTIL``
(a percentage, divided by 100), else the simulator's synthesis from a job's declared profile.

Readers (the autoscaler, workload autoscaling, billing) never see raw samples: they read a
:class:`UtilSummary` of a rolling window, per device, per job or per cluster, and treat a
window with too few samples (``samples == 0``) as *unknown*, never as idle: an idle timer fed
by missing telemetry is one of the failures the issue names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class UtilSource(StrEnum):
    GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
    SYNTHETIC = "synthetic"


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One reading: ``util`` 0..1, memory in bytes (0 when the exporter did not say)."""

    node: str
    device: str
    at: float
    util: float
    memory_used_bytes: int = 0
    memory_total_bytes: int = 0
    source: UtilSource = UtilSource.SYNTHETIC


@dataclass(frozen=True, slots=True)
class UtilSummary:
    """A rolling window's summary: ``mean`` and ``peak`` utilisation 0..1 over ``span``
    seconds ending at ``until``, from ``samples`` readings (0 = unknown)."""

    mean: float
    peak: float
    samples: int
    span: float
    until: float
    memory_used_bytes: int = 0

    @property
    def known(self) -> bool:
        return self.samples > 0


class UtilisationReader(Protocol):
    """What the autoscalers and billing read: rolling-window summaries (None: no telemetry
    for it). The service keeps one (``service/utilisation.py``, fed by backends that are a
    :class:`~gpuaas.backends.base.TelemetrySource` and by dcgm-exporter scrapes); tests and
    the simulator may pass any object with these methods. ``key`` of a cluster is its
    ``<tenant>.<cluster>`` label value."""

    def device(self, node: str, device: str) -> UtilSummary | None: ...

    def node(self, node: str) -> UtilSummary | None: ...

    def job(self, job_id: int) -> UtilSummary | None: ...

    def cluster(self, key: str) -> UtilSummary | None: ...
