"""What the utilisation routes return (docs/telemetry.md). Utilisation is a percentage of the
device's time its graphics engine was busy, as the job spec's ``utilization`` and the
autoscaling targets are; ``/metrics`` shows the same as a ratio 0..1."""

from __future__ import annotations

from pydantic import BaseModel

from gpuaas.model.telemetry import UtilSummary
from gpuaas.service.models.common import ReasonView


class WindowOut(BaseModel):
    """A rolling window's summary. ``known`` false: no sample newer than the staleness bound
    (the window reads *unknown*, not idle), and ``utilization`` / ``peak`` are null."""

    known: bool
    utilization: float | None
    peak: float | None
    samples: int
    spanSeconds: float
    until: float
    memoryUsedBytes: int

    @classmethod
    def of(cls, s: UtilSummary) -> WindowOut:
        return cls(
            known=s.known,
            utilization=round(s.mean * 100, 3) if s.known else None,
            peak=round(s.peak * 100, 3) if s.known else None,
            samples=s.samples,
            spanSeconds=round(s.span, 3),
            until=s.until,
            memoryUsedBytes=s.memory_used_bytes,
        )


class DeviceWindowOut(BaseModel):
    """One metered device (``gpu-3``, ``gpu-3-mig-1g10gb-4``): where its reading came from
    (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, ``DCGM_FI_DEV_GPU_UTIL``, ``synthetic``)."""

    node: str
    device: str
    source: str | None = None
    memoryTotalBytes: int | None = None
    jobs: list[int] | None = None
    window: WindowOut | None


class TelemetryCondition(BaseModel):
    """Why a node's telemetry is missing or partial, since ``since``."""

    reason: ReasonView
    since: float


class NodeUtilizationOut(BaseModel):
    node: str
    windowSeconds: float
    staleAfterSeconds: float
    dcgmExporter: str | None
    window: WindowOut | None
    condition: TelemetryCondition | None
    devices: list[DeviceWindowOut]


class JobUtilizationOut(BaseModel):
    """A job's devices' windows (null: it holds no device, or none reports)."""

    job: int
    tenant: str
    cluster: str | None
    windowSeconds: float
    window: WindowOut | None
    devices: list[DeviceWindowOut]


class ClusterNodeWindowOut(BaseModel):
    node: str
    window: WindowOut | None


class ClusterUtilizationOut(BaseModel):
    """A tenant cluster's nodes' devices, idle ones included."""

    cluster: str
    tenant: str
    windowSeconds: float
    window: WindowOut | None
    nodes: list[ClusterNodeWindowOut]
