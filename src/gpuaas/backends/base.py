"""What the reconciler needs of a backend: launch, cancel, and report what happened.

Who owns what: the reconciler owns the job states in the database and decides; a backend only
runs what it is given (a :class:`BackendJob`, its pods typed as
:class:`~gpuaas.model.placement.PodPlacement`) and reports back through :meth:`Backend.poll`.
A backend keeps whatever it needs to find its jobs again (pids, Slurm job ids) in its own state
directory, so after a control-plane restart the reconciler launches every admitted or running job
again with the time it started (``started_at``) and the backend resumes following it rather than
starting it twice: ``(job id, attempt)`` names one run, and a backend never runs the same pair
twice.

Calls may be slow or fail (a Slurm controller is a network away): the service calls a backend
beside the admission step, never inside it. A backend that cannot reach what it drives raises
:class:`BackendUnavailable` from any call; the service shows it as a reason and a metric and
retries. A job the backend will never run (a command that cannot start, a container where no
runtime is configured, a partition that refuses it) is reported as :attr:`EventKind.REJECTED`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from gpuaas.model.errors import GpuaasError
from gpuaas.model.placement import PodPlacement
from gpuaas.model.telemetry import DeviceSample

#: Seconds between SIGTERM (or Slurm's cancel) and SIGKILL when a job is stopped.
DEFAULT_GRACE = 10.0


def nic_variables(pod: PodPlacement) -> dict[str, str]:
    """What a pod given RDMA NICs learns of them (none for a pod without): ``NCCL_IB_HCA``
    the NICs' RDMA device names, each once (a VF ``mlx5_0-vf-3`` is on NIC ``mlx5_0``), and
    ``GPUAAS_NICS`` the devices themselves (VF names, :func:`gpuaas.model.network.vf_name`),
    in the order they were given."""
    names = [d.name for d in pod.nics]
    if not names:
        return {}
    hcas = dict.fromkeys(name.rsplit("-vf-", 1)[0] for name in names)
    return {"NCCL_IB_HCA": ",".join(hcas), "GPUAAS_NICS": ",".join(names)}


class EventKind(StrEnum):
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LOST = "lost"  # the backend no longer runs the job (its machine or process vanished)
    REJECTED = "rejected"  # the backend will never run it as given (bad command, refused)


class BackendUnavailable(GpuaasError):
    """The backend cannot reach what it drives right now (retry later)."""


@dataclass(frozen=True, slots=True)
class BackendJob:
    """An admitted job handed to a backend: what to run and where.

    ``spec`` is the job as the user submitted it (``command`` / ``script`` / ``container``,
    ``env``, ``maxRunTime``, ``duration``); ``pods`` the placement; ``attempt`` counts
    admissions (a requeued job runs again as a new attempt); ``started_at`` is set when the
    job was already running (resumed after a restart).
    """

    id: int
    name: str
    spec: Mapping[str, Any]
    pods: tuple[PodPlacement, ...] = ()
    started_at: float | None = None
    attempt: int = 0
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class BackendEvent:
    """``reason``: the backend's own words (the tail of stderr, Slurm's reason);
    ``exit_code``: the job's exit code where it has one (a failure, or 0 on success)."""

    job_id: int
    kind: EventKind
    at: float
    reason: str = ""
    exit_code: int | None = None


class Backend(Protocol):
    """``time_scale``: job seconds per wall second (a simulated fleet runs faster);
    ``blocking``: whether calls may wait on I/O (processes, a network). The service calls a
    blocking backend from a thread of its own, with the wall clock, and a non-blocking one (the
    simulated fleet) inline, with the reconciler's clock."""

    name: str
    time_scale: float
    blocking: bool

    def launch(self, job: BackendJob) -> None:
        """Start ``job`` (or, with ``started_at``, keep following it)."""
        ...

    def cancel(self, job_id: int, grace: float = DEFAULT_GRACE) -> None:
        """Stop ``job_id`` if it runs (terminate, wait ``grace`` seconds, kill); unknown ids
        are ignored. Returns without waiting for the grace period to end."""
        ...

    def poll(self, now: float) -> list[BackendEvent]:
        """What happened up to ``now``, in order: starts, then completions."""
        ...

    def running(self) -> set[int]:
        """The ids of the jobs this backend follows."""
        ...


@runtime_checkable
class TelemetrySource(Protocol):
    """A backend that can say how busy its devices are (the simulated fleet synthesises it
    from each job's declared profile; a node naming a dcgm-exporter URL is scraped by the
    service instead). Optional: the service checks ``isinstance(backend, TelemetrySource)``
    (hence ``runtime_checkable``) and treats a backend without it as having no telemetry."""

    def samples(self, now: float) -> list[DeviceSample]:
        """The readings taken since the last call, up to ``now``."""
        ...
