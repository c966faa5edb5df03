"""A job's lifecycle: the states it passes through and the moves between them.

One declaration for every layer that names a job state: the service records transitions
(:func:`gpuaas.service.jobs.transition`), the reconciler and the governance checks ask which
jobs still hold quota or devices, the metrics report every state, and the command line words its
answers by them. A state is a :class:`~enum.StrEnum`, so it compares equal to the text the
database stores and the API returns (``JobState.PENDING == "Pending"``) and can go straight into
a query. Preempted is transient: a preempted job is requeued (Pending) in the same transaction.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "Pending"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    PREEMPTED = "Preempted"


#: States in which a job holds quota in its ClusterQueue and devices on its nodes.
ACTIVE = (JobState.ADMITTED, JobState.RUNNING)
#: States a job never leaves.
FINAL = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
#: States of a job that is not finished: it still needs its LocalQueue and may be cancelled.
UNFINISHED = (JobState.PENDING, *ACTIVE)
#: Every transition a job may make (``None``: not yet submitted).
TRANSITIONS: dict[JobState | None, frozenset[JobState]] = {
    None: frozenset({JobState.PENDING}),
    JobState.PENDING: frozenset({JobState.ADMITTED, JobState.CANCELLED, JobState.FAILED}),
    JobState.ADMITTED: frozenset(
        {
            JobState.RUNNING,
            JobState.PREEMPTED,
            JobState.CANCELLED,
            JobState.FAILED,
            JobState.SUCCEEDED,
        }
    ),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTED}
    ),
    JobState.PREEMPTED: frozenset({JobState.PENDING}),
}
