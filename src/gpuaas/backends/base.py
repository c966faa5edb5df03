"""What the reconciler needs of a backend: launch, cancel, and report what happened.

The reconciler owns the job states in the database; a backend only runs what it is given and
reports back through :meth:`Backend.poll`. After a restart the reconciler launches every
admitted or running job again with the time it started (``started_at``), so a backend resumes
following it rather than starting it twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


class EventKind(StrEnum):
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LOST = "lost"  # the backend no longer runs the job (its machine went away): run it again


@dataclass(frozen=True, slots=True)
class BackendJob:
    """An admitted job handed to a backend: what to run and on which nodes.

    ``started_at`` is set when the job was already running (resumed after a restart).
    """

    id: int
    name: str
    spec: Mapping[str, Any]
    placement: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    started_at: float | None = None


@dataclass(frozen=True, slots=True)
class BackendEvent:
    job_id: int
    kind: EventKind
    at: float
    reason: str = ""


class Backend(Protocol):
    """``time_scale``: job seconds per wall second (a simulated fleet runs faster)."""

    name: str
    time_scale: float

    def launch(self, job: BackendJob) -> None:
        """Start ``job`` (or, with ``started_at``, keep following it)."""
        ...

    def cancel(self, job_id: int) -> None:
        """Stop ``job_id`` if it runs; unknown ids are ignored."""
        ...

    def poll(self, now: float) -> list[BackendEvent]:
        """What happened up to ``now``, in order: starts, then completions."""
        ...

    def running(self) -> set[int]:
        """The ids of the jobs this backend follows."""
        ...
