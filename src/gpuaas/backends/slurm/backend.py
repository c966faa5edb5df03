"""The Slurm backend: every gpuaas job is one Slurm batch job on the nodes gpuaas chose.

How it runs a job. :meth:`SlurmBackend.launch` returns at once; a few worker threads write the
job's scripts (:mod:`.script`) and submit them with ``sbatch`` (slurmrestd 22.05 cannot name
nodes), so a burst of admissions does not wait on one ``sbatch`` after another. Before a
submission the backend writes a small record ``<state dir>/<job>-<attempt>.json``; after it,
the Slurm job id. After a control-plane restart the reconciler launches every admitted and
running job again: a record with an id is followed again, a record without one (the process
died inside ``sbatch``), or a running job with no record, is looked up by the job's Slurm name
(``gpuaas-<job>-<attempt>``) before anything is submitted (a running job Slurm has no job for is
``lost``), so no ``(job, attempt)`` is ever submitted twice.

How it follows jobs. :meth:`SlurmBackend.poll` asks Slurm once per call for every job it
knows (slurmrestd's ``GET /slurm/<api>/jobs`` or ``squeue --json``), whatever the number of
jobs followed, and maps each followed job's state: PENDING and CONFIGURING are not started
yet (a pending reason that can never clear, such as ``BadConstraints`` or
``PartitionConfig``, or pending past ``start_timeout``, is cancelled and ``rejected`` with
Slurm's reason); RUNNING is ``started``; COMPLETED is ``succeeded``; FAILED, TIMEOUT,
OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, PREEMPTED and a CANCELLED gpuaas did not ask for (an
administrator's ``scancel``) are ``failed`` with Slurm's state, reason and exit code and the
last lines of the pods' stderr; NODE_FAIL is ``lost`` (the reconciler queues it again). A job
slurmctld no longer lists (past ``MinJobAge``) is looked up in the completion log (``sacct -c``,
one call for all of them); one with no record anywhere is ``lost``. A submission Slurm refuses
(an unknown partition, "Requested node configuration is not available") is ``rejected`` with
Slurm's message.

Stopping: :meth:`cancel` is ``scancel`` by the user who submitted; Slurm sends SIGTERM, waits its
``KillWait`` and kills. gpuaas's preemption is a cancel: the evicted job runs again later as a
new attempt, a new Slurm job. When slurmctld or slurmrestd cannot be reached, calls raise
:class:`~gpuaas.backends.base.BackendUnavailable`; events already gathered are kept for the next
poll and cancels are retried there.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaas.backends.base import (
    DEFAULT_GRACE,
    BackendEvent,
    BackendJob,
    BackendUnavailable,
    EventKind,
)
from gpuaas.backends.logs import LogLayout
from gpuaas.backends.slurm.cli import SlurmCli
from gpuaas.backends.slurm.clusters import account_name, accounting_on, partition_name
from gpuaas.backends.slurm.datasets import DEFAULT_ROOT, SlurmNodeCaches
from gpuaas.backends.slurm.errors import SlurmRefused
from gpuaas.backends.slurm.hostlist import expand
from gpuaas.backends.slurm.inventory import slurm_nodes
from gpuaas.backends.slurm.rest import SlurmRest
from gpuaas.backends.slurm.script import (
    SlurmNode,
    Unrunnable,
    job_name,
    submission,
    write_files,
)
from gpuaas.backends.slurm.version import exit_code, job_state

log = logging.getLogger("gpuaas.backends.slurm")

NOT_STARTED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
               "RESV_DEL_HOLD", "SPECIAL_EXIT", "RESIZING", "SIGNALING", "STAGE_OUT"}  # fmt: skip
STARTED = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED"}
FAILED = {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
#: Pending reasons that will not clear by waiting: the job is rejected at once.
NEVER = {"BadConstraints", "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit",
         "InvalidAccount", "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed",
         "ReqNodeNotAvail, UnavailableNodes", "NodeDown", "JobHeldAdmin"}  # fmt: skip
#: Seconds a node listing (partitions, GPU types, addresses) is reused before asking again.
NODES_TTL = 60.0


@dataclass(slots=True)
class _Run:
    job: BackendJob
    slurm_id: int | None = None
    launched_at: float = field(default_factory=time.time)
    submitting: Future[int | None] | None = None
    started: bool = False
    gres: dict[str, list[int]] = field(default_factory=dict)


class SlurmBackend:
    """See the module docstring. ``rest``: slurmrestd (listing, cancel, nodes), or None to use
    the commands only; ``cli``: the Slurm commands (``sbatch`` is always used to submit)."""

    name = "slurm"
    #: talks to slurmctld (slurmrestd, sbatch): the service calls it from a thread of its own
    blocking = True
    time_scale = 1.0

    def __init__(
        self,
        logs: LogLayout,
        state_dir: Path,
        rest: SlurmRest | None = None,
        cli: SlurmCli | None = None,
        partition: str | None = None,
        prefix: str = "gpuaas",
        start_timeout: float = 300.0,
        workers: int = 8,
        claim_grace: float = 60.0,
        nic_gres: Mapping[str, str] | None = None,
        dataset_cache: Path | None = None,
        dataset_command: Sequence[str] | None = None,
    ) -> None:
        self.logs = logs
        #: NIC pool -> the cluster's gres name for it (see gpuaas.backends.slurm.script)
        self.nic_gres = dict(nic_gres or {})
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.rest = rest
        self.cli = cli or SlurmCli()
        self.partition = partition
        self.prefix = prefix
        self.start_timeout = start_timeout
        #: calls made to Slurm, by kind ("list", "sacct", "submit", "cancel", "nodes")
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._nodes_lock = threading.Lock()
        self._runs: dict[int, _Run] = {}
        self._carry: list[BackendEvent] = []  # events gathered by a poll that then failed
        self._to_cancel: set[int] = set()  # Slurm ids whose cancel must be retried
        #: Slurm ids signalled to checkpoint, cancelled for good at their time (monotonic)
        self._cancel_at: dict[int, float] = {}
        # records left by an earlier control plane that no launch has claimed yet; after
        # claim_grace seconds (the reconciler relaunches what it still runs first) they are
        # jobs gpuaas no longer runs, cancelled in Slurm
        self._unclaimed = {p.stem for p in self.state_dir.glob("*.json")}
        self._claim_by = time.monotonic() + claim_grace
        self._accounting: bool | None = None  # whether slurmctld keeps accounting (asked once)
        self._nodes: dict[str, SlurmNode] = {}
        self._nodes_at = -NODES_TTL
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="slurm-submit")
        #: each node's dataset cache, on the node's own disk (see gpuaas.backends.slurm.datasets)
        self.datasets = SlurmNodeCaches(
            self.cli, logs.root / "datasets", Path(dataset_cache or DEFAULT_ROOT),
            dataset_command, partition, prefix,
        )  # fmt: skip

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self.rest is not None:
            self.rest.close()

    # --- the contract ---------------------------------------------------------------------

    def running(self) -> set[int]:
        with self._lock:
            return set(self._runs)

    def launch(self, job: BackendJob) -> None:
        with self._lock:
            previous = self._runs.get(job.id)
        if previous is not None and previous.job.attempt == job.attempt:
            return  # already followed: never twice
        if previous is not None:
            self.cancel(job.id)  # an older attempt still followed: it stops before this one runs
        with self._lock:
            self._unclaimed.discard(self._key(job))
            run = _Run(job)
            record = self._read_record(job)
            if record is not None and record.get("slurm_id") is not None:
                run.slurm_id = int(record["slurm_id"])
                run.launched_at = float(record.get("launched_at") or run.launched_at)
                run.started = job.started_at is not None
            else:
                # died inside sbatch, or running with no record: look for it by name first
                adopt = record is not None or job.started_at is not None
                run.submitting = self._pool.submit(self._submit, job, adopt)
            self._runs[job.id] = run

    def cancel(self, job_id: int, grace: float = DEFAULT_GRACE) -> None:
        with self._lock:
            run = self._runs.pop(job_id, None)
        if run is None:
            return
        if run.slurm_id is None and run.submitting is not None:
            # cancelled while sbatch runs: cancel what it submits, once it has
            run.submitting.add_done_callback(lambda f: self._cancel_submitted(f, run.job))
            return
        self._forget(run.job)
        if run.slurm_id is not None:
            self._cancel_slurm(run.slurm_id)

    def checkpoint(self, job_id: int, grace: float) -> None:
        """The idle pool's reclaim: the checkpoint signal now, a cancel ``grace`` seconds
        later. ``scancel --signal=TERM`` sends SIGTERM to the job's steps (the pods'
        processes, not the batch shell waiting on ``srun``) and leaves the job running; the
        cancel (``scancel``: SIGTERM again, ``KillWait``, SIGKILL) is made by the first
        :meth:`poll` once ``grace`` has passed. The job is no longer followed (as after
        :meth:`cancel`): the service evicts it at the deadline."""
        with self._lock:
            run = self._runs.get(job_id)
            slurm_id = run.slurm_id if run is not None else None
        if run is None or slurm_id is None:
            self.cancel(job_id, grace)  # not submitted yet: nothing to checkpoint
            return
        try:  # unreachable: raised, and the driver sends it again, in order
            self.calls["signal"] += 1
            self.cli.run("scancel", "--signal=TERM", str(slurm_id))
        except SlurmRefused as exc:  # it ended meanwhile: the cancel below is harmless
            log.warning("scancel --signal=TERM %s: %s", slurm_id, exc)
        with self._lock:
            self._runs.pop(job_id, None)
            self._cancel_at[slurm_id] = time.monotonic() + grace
        self._forget(run.job)

    def _due_cancels(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = sorted(i for i, at in self._cancel_at.items() if at <= now)
            for slurm_id in due:
                del self._cancel_at[slurm_id]
        for slurm_id in due:
            self._cancel_slurm(slurm_id)

    def poll(self, now: float) -> list[BackendEvent]:
        events, self._carry = self._carry, []
        try:
            self._due_cancels()
            self._retry_cancels()
            self._collect_submissions(now, events)
            with self._lock:
                follow = {r.slurm_id: r for r in self._runs.values() if r.slurm_id is not None}
            self._cancel_unclaimed(follow)
            if not follow:
                return events
            listing = {int(j["job_id"]): j for j in self._list_jobs()}
            missing = []
            for slurm_id, run in sorted(follow.items()):
                info = listing.get(slurm_id)
                if info is None:
                    missing.append(run)
                else:
                    self._follow(run, info, now, events)
            if missing:
                self._vanished(missing, now, events)
        except BackendUnavailable:
            self._carry = events
            raise
        return events

    # --- what tests and the benchmark may ask ----------------------------------------------

    def slurm_id(self, job_id: int) -> int | None:
        with self._lock:
            run = self._runs.get(job_id)
        if run is not None and run.slurm_id is not None:
            return run.slurm_id
        for path in self.state_dir.glob(f"{job_id}-*.json"):
            record = json.loads(path.read_text())
            if record.get("slurm_id") is not None:
                return int(record["slurm_id"])
        return None

    def slurm_gpus(self, job_id: int) -> dict[str, list[int]]:
        """The GPU indexes Slurm gave a running job on each node, as last listed."""
        with self._lock:
            run = self._runs.get(job_id)
        return dict(run.gres) if run is not None else {}

    # --- submitting -----------------------------------------------------------------------

    def _key(self, job: BackendJob) -> str:
        return f"{job.id}-{job.attempt}"

    def _record_path(self, job: BackendJob) -> Path:
        return self.state_dir / f"{self._key(job)}.json"

    def _read_record(self, job: BackendJob) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self._record_path(job).read_text()))
        except (OSError, ValueError):
            return None

    def _write_record(self, job: BackendJob, slurm_id: int | None) -> None:
        path = self._record_path(job)
        tmp = path.with_suffix(".tmp")
        body = {
            "job": job.id,
            "attempt": job.attempt,
            "slurm_id": slurm_id,
            "name": job_name(self.prefix, job.id, job.attempt),
            "launched_at": time.time(),
        }
        tmp.write_text(json.dumps(body))  # fmt: skip
        tmp.replace(path)

    def _forget(self, job: BackendJob) -> None:
        self._record_path(job).unlink(missing_ok=True)

    def _submit(self, job: BackendJob, adopt: bool) -> int | None:
        """In a worker thread: the Slurm id of ``job`` (found again or submitted).
        Raises Unrunnable / SlurmRefused (rejected) or BackendUnavailable (retried)."""
        name = job_name(self.prefix, job.id, job.attempt)
        if adopt:
            self.calls["list"] += 1
            for info in self._jobs_listing():
                if info.get("name") == name:
                    self._write_record(job, int(info["job_id"]))
                    return int(info["job_id"])
            if job.started_at is not None:
                return None  # it ran, and Slurm has no such job: lost, never run again
        partition, nodes, account = self.partition, self.nodes(), None
        cluster = job.spec.get("cluster")
        if isinstance(cluster, str) and job.tenant:  # a tenant cluster: its own partition
            partition = partition_name(job.tenant, cluster)
            if any(partition not in nodes[p.node].partitions for p in job.pods if p.node in nodes):
                nodes = self.nodes(fresh=True)  # the partition changed since the last listing
            if self._accounting is None:
                self._accounting = accounting_on(self.cli)
            account = account_name(job.tenant) if self._accounting else None
        sub = submission(
            job, self.logs, nodes, partition, self.prefix, self.nic_gres, self.datasets
        )
        if account is not None:  # the partition admits the tenant's account only
            sub.options.append(f"--account={account}")
        script = write_files(self.logs.attempt_dir(job.id, job.attempt), sub)
        self._write_record(job, None)
        self.calls["submit"] += 1
        slurm_id = self.cli.submit(script, sub.options)
        self._write_record(job, slurm_id)
        return slurm_id

    def _collect_submissions(self, now: float, events: list[BackendEvent]) -> None:
        """Take the results of finished submissions: ids, refusals, and retries."""
        with self._lock:
            done = [r for r in self._runs.values() if r.submitting and r.submitting.done()]
        unavailable: BaseException | None = None
        for run in done:
            future, run.submitting = run.submitting, None
            assert future is not None
            try:
                run.slurm_id = future.result()
                if run.slurm_id is None:
                    self._end(run)
                    said = f"Slurm has no job {job_name(self.prefix, run.job.id, run.job.attempt)}"
                    events.append(BackendEvent(run.job.id, EventKind.LOST, now, said))
            except (Unrunnable, SlurmRefused) as exc:
                self._drop(run)
                self._forget(run.job)
                events.append(BackendEvent(run.job.id, EventKind.REJECTED, now, f"Slurm: {exc}"))
            except BackendUnavailable as exc:
                unavailable = exc
                with self._lock:  # submit again (the record says whether to look first)
                    adopt = self._read_record(run.job) is not None
                    run.submitting = self._pool.submit(self._submit, run.job, adopt)
            except Exception as exc:  # a bug or an OS error: say so on the job
                log.exception("submitting job %s failed", run.job.id)
                self._drop(run)
                self._forget(run.job)
                events.append(
                    BackendEvent(run.job.id, EventKind.REJECTED, now, f"slurm backend: {exc}")
                )
        if unavailable is not None:
            raise BackendUnavailable(str(unavailable))

    def _cancel_submitted(self, future: Future[int | None], job: BackendJob) -> None:
        try:
            slurm_id = future.result()
        except Exception:  # nothing was submitted
            slurm_id = None
        self._forget(job)
        if slurm_id is not None:
            self._cancel_slurm(slurm_id)

    def _cancel_slurm(self, slurm_id: int) -> None:
        """``scancel``, as the user who submitted it: slurmrestd's local authentication acts
        as slurmrestd's own user, which may not cancel another user's jobs."""
        try:
            self.calls["cancel"] += 1
            self.cli.cancel(slurm_id)
        except BackendUnavailable:
            with self._lock:
                self._to_cancel.add(slurm_id)
        except SlurmRefused as exc:
            log.warning("scancel %s: %s", slurm_id, exc)

    def _retry_cancels(self) -> None:
        with self._lock:
            retry, self._to_cancel = self._to_cancel, set()
        for slurm_id in sorted(retry):
            self._cancel_slurm(slurm_id)

    def _cancel_unclaimed(self, follow: dict[int, _Run]) -> None:
        """Records no launch claimed since this backend started belong to jobs gpuaas no
        longer runs (finished or cancelled while the control plane was down): cancel them."""
        with self._lock:
            if not self._unclaimed or time.monotonic() < self._claim_by:
                return
            unclaimed, self._unclaimed = self._unclaimed, set()
        for key in sorted(unclaimed):
            path = self.state_dir / f"{key}.json"
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if record.get("slurm_id") is not None and int(record["slurm_id"]) not in follow:
                self._cancel_slurm(int(record["slurm_id"]))
            path.unlink(missing_ok=True)

    def _drop(self, run: _Run) -> None:
        with self._lock:
            if self._runs.get(run.job.id) is run:
                del self._runs[run.job.id]

    # --- following --------------------------------------------------------------------------

    def nodes(self, fresh: bool = False) -> dict[str, SlurmNode]:
        """Slurm's nodes (partitions, GPU types, addresses), asked at most every NODES_TTL s
        (``fresh``: now)."""
        with self._nodes_lock:  # one listing for a burst of submissions, not one each
            if fresh or time.monotonic() - self._nodes_at >= NODES_TTL:
                self.calls["nodes"] += 1
                listing = self.rest.nodes() if self.rest is not None else self.cli.nodes()
                self._nodes = slurm_nodes(listing)
                self._nodes_at = time.monotonic()
            return self._nodes

    def _jobs_listing(self) -> list[dict[str, Any]]:
        return self.rest.jobs() if self.rest is not None else self.cli.jobs()

    def _list_jobs(self) -> list[dict[str, Any]]:
        self.calls["list"] += 1
        return self._jobs_listing()

    def _follow(self, run: _Run, info: dict[str, Any], now: float, ev: list[BackendEvent]) -> None:
        state = job_state(info.get("job_state"))
        why = str(info.get("state_reason") or "None")
        job_id = run.job.id
        if state in NOT_STARTED:
            if why in NEVER or now - run.launched_at > self.start_timeout:
                waited = f" after {now - run.launched_at:.0f}s" if why not in NEVER else ""
                self._end(run)
                self._cancel_slurm(int(info["job_id"]))
                said = f"Slurm kept job {info['job_id']} {state}{waited} ({why})"
                ev.append(BackendEvent(job_id, EventKind.REJECTED, now, said))
            return
        ran = state in STARTED or (int(info.get("start_time") or 0) > 0 and state != "CANCELLED")
        if ran and not run.started:
            run.started = True
            ev.append(BackendEvent(job_id, EventKind.STARTED, now))
        if state in STARTED:
            details = info.get("gres_detail") or []
            if details and not run.gres:
                run.gres = _gres_by_node(str(info.get("nodes") or ""), details)
            return
        code = exit_code(info.get("exit_code"))
        self._end(run)
        if state == "COMPLETED" and (code or 0) == 0:
            dataset = (run.job.spec.get("resolved") or {}).get("dataset")
            if dataset and run.job.tenant:  # its nodes' fill step reported what they hold
                folder = self.logs.attempt_dir(run.job.id, run.job.attempt)
                self.datasets.reported(run.job.tenant, dataset, folder)
            ev.append(BackendEvent(job_id, EventKind.SUCCEEDED, now, "completed", 0))
            return
        said = _said(info.get("job_id"), state, why, code) + self._stderr_tail(run.job)
        if state == "NODE_FAIL":
            ev.append(BackendEvent(job_id, EventKind.LOST, now, said, code))
        elif state == "CANCELLED":
            ev.append(BackendEvent(job_id, EventKind.FAILED, now,
                                   f"cancelled in Slurm: {said}", code))  # fmt: skip
        else:
            ev.append(BackendEvent(job_id, EventKind.FAILED, now, said, code))

    def _vanished(self, runs: list[_Run], now: float, events: list[BackendEvent]) -> None:
        """Jobs slurmctld no longer lists: the completion log (one call), else lost."""
        try:
            self.calls["sacct"] += 1
            finished = self.cli.finished(r.slurm_id for r in runs if r.slurm_id is not None)
        except SlurmRefused as exc:
            log.warning("sacct -c: %s", exc)
            finished = {}
        for run in runs:
            assert run.slurm_id is not None
            record = finished.get(run.slurm_id)
            if record is None:
                self._end(run)
                said = f"Slurm job {run.slurm_id} is gone and Slurm has no record of how it ended"
                events.append(BackendEvent(run.job.id, EventKind.LOST, now, said))
                continue
            state, code = record
            info = {"job_id": run.slurm_id, "job_state": state, "state_reason": "None",
                    "start_time": 1 if state != "CANCELLED" or run.started else 0}  # fmt: skip
            info["exit_code"] = (code or 0) << 8 if (code or 0) < 128 else code
            self._follow(run, info, now, events)

    def _end(self, run: _Run) -> None:
        self._drop(run)
        self._forget(run.job)

    def _stderr_tail(self, job: BackendJob, lines: int = 3, limit: int = 400) -> str:
        """The last lines of the first pod stderr that has any (Slurm's own output if none)."""
        paths = [self.logs.stderr(job.id, job.attempt, p.rank) for p in job.pods]
        paths += sorted(self.logs.attempt_dir(job.id, job.attempt).glob("slurm-*.out"))
        for path in paths:
            try:
                text = path.read_text(errors="replace").strip()
            except OSError:
                continue
            kept = [ln for ln in text.splitlines() if not ln.startswith("gpuaas: Slurm allocated")]
            if kept:
                return "; stderr: " + " | ".join(kept[-lines:])[-limit:]
        return ""


def _said(slurm_id: object, state: str, why: str, code: int | None) -> str:
    text = f"Slurm job {slurm_id} {state}"
    if why not in ("None", ""):
        text += f" ({why})"
    if code is not None:
        text += f", exit code {code}"
    return text


def _gres_by_node(nodes: str, details: list[Any]) -> dict[str, list[int]]:
    """slurmrestd's ``gres_detail`` (one entry per node, in the job's node order)."""
    from gpuaas.backends.slurm.cli import parse_indexes

    return {node: parse_indexes(str(d)) for node, d in zip(expand(nodes), details, strict=False)}
