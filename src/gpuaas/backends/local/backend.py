"""The local backend: every pod of a job is a real process group on this host.

A run is one job's attempt. :meth:`LocalBackend.launch` records the run (its pods' commands and
environments, :mod:`.state`) and starts each pod as ``python -I -S wrapper.py POD_DIR --
COMMAND`` in a new session (:mod:`.wrapper`), in ``<state dir>/<job>/attempt-<n>/pod-<rank>``,
stdout and stderr appended to the :class:`~gpuaas.backends.logs.LogLayout` files. Then
:meth:`LocalBackend.poll` reports:

- STARTED once every pod has a process;
- when one pod fails (a non-zero exit, a signal, a process that vanished), the others are
  stopped (SIGTERM to their groups, SIGKILL ``stop_grace`` seconds later): a gang ends as a whole;
- once every pod has ended: SUCCEEDED when all exited 0; else, for the first pod that failed
  (by rank, among those that failed before the others were stopped), FAILED with its exit code
  (128 + N for signal N) and the last lines of its stderr; LOST when its process vanished
  without an exit code (the reconciler queues the job again); REJECTED when its command could
  not be started.

A job that cannot run here (a command not found or not executable, a container without a
configured runtime, no placement) is REJECTED at launch, never raised.

:meth:`LocalBackend.cancel` sends SIGTERM to every pod's group and SIGKILL ``grace`` seconds
later, from a timer thread: the caller does not wait, and the kill happens even if nobody polls.

**Restart.** The backend reads every run recorded in its state directory when it is built: a run
that has not ended is followed again (a pod's process is recognised by its pid *and* start time,
so a reused pid is not taken for it; its exit code is read from the file its wrapper writes).
A pod whose process is gone without an exit code is lost. A launch of a recorded run (same job,
same attempt) reattaches to it, or reports its recorded outcome again; it never starts a pod
that was started (the wrapper's claim file guards even a pod whose start was not recorded). A
launch of a newer attempt first stops the older one and starts its pods once the older ones are
gone. Nothing is run twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from gpuaas.backends.base import DEFAULT_GRACE, BackendEvent, BackendJob, EventKind
from gpuaas.backends.dataset_cache import CacheError, NodeCaches
from gpuaas.backends.local import commands, procs
from gpuaas.backends.local.state import Outcome, PodRecord, RunRecord, saved_runs
from gpuaas.backends.local.wrapper import ALREADY_CLAIMED
from gpuaas.backends.logs import LogLayout

log = logging.getLogger("gpuaas.backends.local")

WRAPPER = Path(__file__).with_name("wrapper.py")
#: Lines of a failed pod's stderr quoted in the failure's reason.
STDERR_TAIL_LINES = 5
_TAIL_BYTES = 8192
#: Why a run is being stopped (RunRecord.stopping).
CANCELLED = "cancelled"
POD_FAILED = "pod failed"
REPLACED = "replaced by a newer attempt"


class PodState(Enum):
    UNSTARTED = "unstarted"
    RUNNING = "running"
    EXITED = "exited"
    GONE = "gone"  # the wrapper ended without an exit code


@dataclass(frozen=True, slots=True)
class PodStatus:
    state: PodState
    returncode: int | None = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.state is PodState.GONE or (
            self.state is PodState.EXITED and self.returncode != 0
        )


@dataclass(slots=True)
class _Pod:
    record: PodRecord
    process: subprocess.Popen[bytes] | None = None  # when this backend started it

    @property
    def dir(self) -> Path:
        return Path(self.record.dir)


@dataclass(slots=True)
class _Run:
    record: RunRecord
    pods: list[_Pod] = field(default_factory=list)
    reported_start: bool = False
    killed: bool = False  # SIGKILL sent (containers removed) once already

    @property
    def job_id(self) -> int:
        return self.record.job_id


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (FileNotFoundError, ValueError):
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((commands.MASTER_ADDR, 0))
        return int(s.getsockname()[1])


def stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    """The last ``lines`` non-empty lines of ``path`` (its last few KiB), joined by " | "."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


class LocalBackend:
    """See the module docstring. ``container_runtime``: the ``docker`` or ``podman`` program
    that runs ``container`` jobs (None: they are rejected); ``stop_grace``: seconds between
    SIGTERM and SIGKILL when the backend stops pods itself (a failed gang, a replaced attempt)."""

    name = "local"
    #: starts processes and reads files: the service calls it from a thread of its own
    blocking = True

    def __init__(
        self,
        state_dir: Path,
        logs: LogLayout,
        *,
        container_runtime: str | None = None,
        time_scale: float = 1.0,
        stop_grace: float = DEFAULT_GRACE,
        dataset_cache: Path | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        #: each node's dataset cache (docs/datasets.md): a job's dataset is copied there
        self.datasets = NodeCaches(
            Path(dataset_cache) if dataset_cache else self.state_dir / "dataset-cache"
        )
        self.logs = logs
        self.container_runtime = container_runtime or None
        self.time_scale = time_scale
        self.stop_grace = stop_grace
        self._lock = threading.RLock()
        self._runs: dict[int, _Run] = {}  # the run each followed job is on
        self._stopping: list[_Run] = []  # runs being stopped (cancelled or replaced)
        self._pending: list[BackendEvent] = []  # reported at the next poll (at=-1: then)
        self._helpers: list[subprocess.Popen[bytes]] = []  # `docker rm -f` and the like
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for record in saved_runs(self.state_dir):
            if record.outcome is None:
                self._follow(record)

    # --- the protocol -----------------------------------------------------------------------

    def launch(self, job: BackendJob) -> None:
        with self._lock:
            try:
                self._launch(job)
            except commands.CannotRun as exc:
                self._reject(job, str(exc))
            except OSError as exc:
                log.exception("job %s: could not start", job.id)
                self._reject(job, f"could not start the job's processes: {exc}")

    def cancel(self, job_id: int, grace: float = DEFAULT_GRACE) -> None:
        with self._lock:
            run = self._runs.pop(job_id, None)
            if run is not None:
                self._stop(run, CANCELLED, grace)

    def running(self) -> set[int]:
        with self._lock:
            return set(self._runs)

    def poll(self, now: float) -> list[BackendEvent]:
        with self._lock:
            pending = [
                e if e.at >= 0 else BackendEvent(e.job_id, e.kind, now, e.reason, e.exit_code)
                for e in self._pending
            ]
            self._pending = []
            self._check_stopping()
            events = [e for e in pending if e.kind is EventKind.STARTED]
            ends = [e for e in pending if e.kind is not EventKind.STARTED]
            for job_id in sorted(self._runs):
                run = self._runs[job_id]
                self._start_waiting(run)
                started, ended = self._follow_run(run, now)
                events += started
                if ended is not None:
                    del self._runs[job_id]
                    ends.append(ended)
            self._reap_helpers()
            return events + ends

    # --- launching --------------------------------------------------------------------------

    def _launch(self, job: BackendJob) -> None:
        current = self._runs.get(job.id)
        if current is not None:
            if current.record.attempt == job.attempt:  # already followed: never twice
                if job.started_at is None and current.reported_start:
                    # the caller did not store the start we reported (a failed step): again
                    at = current.record.started_at
                    self._pending.append(BackendEvent(job.id, EventKind.STARTED, at or -1))
                return
            if current.record.attempt > job.attempt:
                log.warning("job %s: attempt %s launched after attempt %s; ignored", job.id,
                            job.attempt, current.record.attempt)  # fmt: skip
                return
            del self._runs[job.id]
            self._stop(current, REPLACED, self.stop_grace)
        path = RunRecord.path(self.state_dir, job.id, job.attempt)
        if path.exists():
            try:
                record = RunRecord.load(path)
            except (ValueError, TypeError, KeyError) as exc:
                # it may have run: never again under this attempt; the caller requeues it
                why = f"the record of attempt {job.attempt} is unreadable ({exc}); not run again"
                self._pending.append(BackendEvent(job.id, EventKind.LOST, -1, why))
                return
            if record.outcome is None:
                self._follow(record)
            else:
                self._pending.append(self._recorded_outcome(record))
            return
        record = self._plan(job)
        record.save(self.state_dir)  # before any pod starts: a restart then finds them
        try:
            self._follow(record)  # starts the pods, saves their pids
        except OSError:
            started = self._runs.pop(job.id, None)
            if started is not None:  # the pods that did start are stopped at once
                self._stop(started, "not every pod could start", 0.0)
            raise

    def _plan(self, job: BackendJob) -> RunRecord:
        """The run's record: each pod's directory, command and environment (CannotRun when the
        job cannot run here)."""
        if not job.pods:
            raise commands.CannotRun("the job has no placement (no pods to run)")
        container = job.spec.get("container")
        if container is not None and self.container_runtime is None:
            raise commands.CannotRun(
                "no container runtime configured on the local backend (set "
                "GPUAAS_CONTAINER_RUNTIME to docker or podman, or run a command or script)"
            )
        attempt_dir = self.state_dir / str(job.id) / f"attempt-{job.attempt}"
        hostfile = attempt_dir / "hostfile"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        hostfile.write_text(commands.hostfile_text(job))
        commands.volume_mounts(job.spec)  # every volume is here (CannotRun otherwise)
        record = RunRecord(job.id, job.attempt, job.name, _free_port(),
                           container_runtime=self.container_runtime)  # fmt: skip
        base = commands.base_environment()
        dataset = (job.spec.get("resolved") or {}).get("dataset")
        for pod in job.pods:
            pod_dir = attempt_dir / f"pod-{pod.rank}"
            pod_dir.mkdir(exist_ok=True)
            ours = commands.gpuaas_variables(job, pod, record.master_port, hostfile)
            if dataset is not None:  # where the pod reads it: its node's cache
                ours.update(self._dataset_environment(job, pod.node, dataset))
            if container is not None:
                assert self.container_runtime is not None
                runtime = self._runtime_path()
                inside = commands.container_environment(job, ours)
                argv = commands.container_command(runtime, job, pod, inside)
                env, name = commands.runtime_environment(base), commands.container_name(job, pod)
            else:
                env = {**base, **commands.job_environment(job.spec)}
                env.update(commands.volume_variables(job.spec, inside=False))
                env.update({**ours, "PWD": str(pod_dir)})
                commands.link_volumes(job.spec, pod_dir)
                argv = commands.process_command(job.spec, pod_dir, env)
                name = None
            record.pods.append(
                PodRecord(pod.rank, str(pod_dir), container=name, argv=argv, env=env)
            )
        return record

    def _dataset_environment(
        self, job: BackendJob, node: str, dataset: dict[str, Any]
    ) -> dict[str, str]:
        """The job reads its dataset from ``node``'s cache, filled first when cold (the read
        that makes the node warm); CannotRun when the dataset is not a path."""
        try:
            self.datasets.fill(node, job.tenant, dataset["name"], dataset["uri"])
        except (CacheError, OSError) as exc:
            raise commands.CannotRun(f"dataset {dataset['name']}: {exc}") from None
        path = self.datasets.data_path(node, job.tenant, dataset["name"])
        return {"GPUAAS_DATASET": dataset["name"], "GPUAAS_DATASET_DIR": str(path)}

    def _runtime_path(self) -> str:
        import shutil

        assert self.container_runtime is not None
        found = shutil.which(self.container_runtime)
        if found is None:
            raise commands.CannotRun(
                f"the container runtime {self.container_runtime!r} (GPUAAS_CONTAINER_RUNTIME) "
                "was not found on this host"
            )
        return found

    def _reject(self, job: BackendJob, why: str) -> None:
        record = RunRecord(job.id, job.attempt, job.name, 0)
        record.outcome = Outcome(EventKind.REJECTED.value, time.time(), why)
        if not RunRecord.path(self.state_dir, job.id, job.attempt).exists():  # pods being stopped
            with contextlib.suppress(OSError):
                record.save(self.state_dir)  # a launch of this attempt again: the same answer
        self._pending.append(BackendEvent(job.id, EventKind.REJECTED, -1, why))
        if job.pods:  # where `gpuaas jobs logs` looks
            with contextlib.suppress(OSError):
                err = self.logs.stderr(job.id, job.attempt, job.pods[0].rank)
                err.parent.mkdir(parents=True, exist_ok=True)
                with err.open("a") as f:
                    f.write(f"gpuaas: not started: {why}\n")

    def _follow(self, record: RunRecord) -> _Run:
        """Follow ``record``'s run (just planned, or found on disk); start the pods not started
        yet unless an older attempt of the job is still being stopped."""
        run = _Run(record, [_Pod(p) for p in record.pods])
        if record.stopping is not None:
            self._stopping.append(run)  # a stop asked before a restart goes on
            if record.kill_at is not None:
                self._kill_later(record.kill_at - time.time())
            return run
        older = self._runs.get(record.job_id)
        if older is not None:
            del self._runs[record.job_id]
            self._stop(older, REPLACED, self.stop_grace)
        self._runs[record.job_id] = run
        self._start_waiting(run)
        return run

    def _start_waiting(self, run: _Run) -> None:
        """Start the pods of ``run`` that never started (none while an older attempt of the same
        job is still being stopped)."""
        if any(other.job_id == run.job_id for other in self._stopping):
            return
        changed = False
        for pod in run.pods:
            if pod.record.pid is None and pod.process is None and not self._claimed(pod):
                self._start(run, pod)
                changed = True
        if changed:
            run.record.save(self.state_dir)

    def _start(self, run: _Run, pod: _Pod) -> None:
        out = self.logs.stdout(run.job_id, run.record.attempt, pod.record.rank)
        err = self.logs.stderr(run.job_id, run.record.attempt, pod.record.rank)
        out.parent.mkdir(parents=True, exist_ok=True)
        pod.dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-I", "-S", str(WRAPPER), str(pod.dir), "--", *pod.record.argv]
        with out.open("ab") as stdout, err.open("ab") as stderr:
            process = subprocess.Popen(
                argv, cwd=pod.dir, env=pod.record.env, stdin=subprocess.DEVNULL,
                stdout=stdout, stderr=stderr, start_new_session=True,
            )  # fmt: skip
        pod.process = process
        found = procs.stat(process.pid)  # our unreaped child: /proc has it, even if it ended
        pod.record.pid = process.pid
        pod.record.start = found.start if found is not None else None

    @staticmethod
    def _claimed(pod: _Pod) -> bool:
        """Whether a wrapper claimed ``pod`` (read its pid and start time into the record)."""
        claim = _read_json(pod.dir / "process")
        if claim is None:
            return False
        pod.record.pid = int(claim["pid"])  # type: ignore[call-overload]
        pod.record.start = int(claim["start"])  # type: ignore[call-overload]
        return True

    # --- following --------------------------------------------------------------------------

    def _status(self, run: _Run, pod: _Pod) -> PodStatus:
        exited = _read_json(pod.dir / "exit-code")
        if exited is not None:
            return self._exited(pod, exited)
        if pod.process is not None:
            code = pod.process.poll()
            if code is None:
                return PodStatus(PodState.RUNNING)
            pod.process = None
            if code == ALREADY_CLAIMED:  # another wrapper runs this pod: follow that one
                if self._claimed(pod):
                    run.record.save(self.state_dir)
                return self._status(run, pod)
        elif pod.record.pid is None and not self._claimed(pod):
            return PodStatus(PodState.UNSTARTED)
        pid, start = pod.record.pid, pod.record.start
        if pid is not None and start is not None and procs.alive(pid, start):
            return PodStatus(PodState.RUNNING)
        exited = _read_json(pod.dir / "exit-code")  # written before the wrapper ends
        if exited is not None:
            return self._exited(pod, exited)
        return PodStatus(PodState.GONE)

    @staticmethod
    def _exited(pod: _Pod, exited: dict[str, object]) -> PodStatus:
        if pod.process is not None:
            pod.process.poll()  # reap the wrapper if it has ended
        error = exited.get("error")
        return PodStatus(
            PodState.EXITED, int(exited["returncode"]),  # type: ignore[call-overload]
            str(error) if error else None,
        )  # fmt: skip

    def _follow_run(self, run: _Run, now: float) -> tuple[list[BackendEvent], BackendEvent | None]:
        """A started event (once) and the end event (when every pod has ended) of ``run``."""
        statuses = [self._status(run, pod) for pod in run.pods]
        record = run.record
        started: list[BackendEvent] = []
        if not run.reported_start and all(s.state is not PodState.UNSTARTED for s in statuses):
            if record.started_at is None:
                record.started_at = now
                record.save(self.state_dir)
            run.reported_start = True
            started.append(BackendEvent(run.job_id, EventKind.STARTED, record.started_at))
        failed = [pod.record.rank for pod, s in zip(run.pods, statuses, strict=True) if s.failed]
        if failed and record.stopping is None:
            record.failed_rank = min(failed)
            record.stopping = POD_FAILED
            record.kill_at = time.time() + self.stop_grace
            record.save(self.state_dir)
            self._signal(run, signal.SIGTERM)
            self._kill_later(self.stop_grace)
        if record.kill_at is not None and time.time() >= record.kill_at:
            self._signal(run, signal.SIGKILL)
        if any(s.state in (PodState.RUNNING, PodState.UNSTARTED) for s in statuses):
            return started, None
        end = self._end(run, statuses, now)
        record.outcome = Outcome(end.kind.value, end.at, end.reason, end.exit_code)
        record.save(self.state_dir)
        return started, end

    def _end(self, run: _Run, statuses: list[PodStatus], now: float) -> BackendEvent:
        job_id, rank = run.job_id, run.record.failed_rank
        if rank is None:
            return BackendEvent(job_id, EventKind.SUCCEEDED, now,
                                f"all {len(run.pods)} pods exited with code 0", 0)  # fmt: skip
        index = next(i for i, pod in enumerate(run.pods) if pod.record.rank == rank)
        status, pod = statuses[index], run.pods[index]
        if status.state is PodState.GONE:
            why = (f"pod {rank}'s process (pid {pod.record.pid}) is gone and left no exit code "
                   "(killed from outside, or its host restarted)")  # fmt: skip
            return BackendEvent(job_id, EventKind.LOST, now, why)
        if status.error is not None:
            return BackendEvent(job_id, EventKind.REJECTED, now, f"pod {rank}: {status.error}")
        code = status.returncode
        assert code is not None
        tail = stderr_tail(self.logs.stderr(job_id, run.record.attempt, rank))
        if code < 0:
            how = f"pod {rank} was killed by signal {signal.Signals(-code).name}"
            code = 128 - code
        else:
            how = f"pod {rank} exited with code {code}"
        return BackendEvent(job_id, EventKind.FAILED, now, f"{how}: {tail}" if tail else how, code)

    @staticmethod
    def _recorded_outcome(record: RunRecord) -> BackendEvent:
        """A run that already ended, launched again: its outcome again (a cancelled run was
        stopped, so it is lost to whoever launches it again)."""
        outcome = record.outcome
        assert outcome is not None
        if outcome.kind == CANCELLED:
            why = f"attempt {record.attempt} was stopped ({outcome.reason}); it is not run again"
            return BackendEvent(record.job_id, EventKind.LOST, outcome.at, why)
        return BackendEvent(record.job_id, EventKind(outcome.kind), outcome.at, outcome.reason,
                            outcome.exit_code)  # fmt: skip

    # --- stopping ---------------------------------------------------------------------------

    def _stop(self, run: _Run, why: str, grace: float) -> None:
        """SIGTERM to every pod of ``run`` now, SIGKILL after ``grace`` seconds; no events."""
        run.record.stopping = why
        kill_at = time.time() + grace
        if run.record.kill_at is not None:  # already being stopped: never later than asked
            kill_at = min(kill_at, run.record.kill_at)
        run.record.kill_at = kill_at
        run.record.save(self.state_dir)
        self._stopping.append(run)
        self._signal(run, signal.SIGTERM)
        self._kill_later(grace)

    def _kill_later(self, grace: float) -> None:
        timer = threading.Timer(max(0.0, grace), self._kill_due)
        timer.daemon = True
        timer.start()

    def _kill_due(self) -> None:
        """SIGKILL what is past its grace period (a timer calls this; so does poll)."""
        with self._lock:
            now = time.time()
            for run in [*self._stopping, *self._runs.values()]:
                if run.record.kill_at is not None and now >= run.record.kill_at:
                    self._signal(run, signal.SIGKILL)
            self._check_stopping()

    def _check_stopping(self) -> None:
        """Forget the stopped runs whose processes are all gone (their record says so)."""
        for run in list(self._stopping):
            if run.record.kill_at is not None and time.time() >= run.record.kill_at:
                self._signal(run, signal.SIGKILL)
            statuses = [self._status(run, pod) for pod in run.pods]
            if any(s.state is PodState.RUNNING for s in statuses):
                continue
            if any(self._group_left(pod) for pod in run.pods):
                continue
            self._stopping.remove(run)
            reason = run.record.stopping or CANCELLED
            run.record.outcome = Outcome(CANCELLED, time.time(), reason)
            run.record.save(self.state_dir)

    @staticmethod
    def _group_left(pod: _Pod) -> bool:
        pid, start = pod.record.pid, pod.record.start
        return pid is not None and start is not None and bool(procs.group_members(pid, start))

    def _signal(self, run: _Run, sig: signal.Signals) -> None:
        first_kill = sig is signal.SIGKILL and not run.killed
        if sig is signal.SIGKILL:
            run.killed = True
        for pod in run.pods:
            pid, start = pod.record.pid, pod.record.start
            if pid is None or start is None:
                continue
            procs.signal_group(pid, start, sig)
            if first_kill and pod.record.container and run.record.container_runtime:
                # the runtime's client is gone; the container may not be
                self._helpers.append(
                    subprocess.Popen(
                        [run.record.container_runtime, "rm", "-f", pod.record.container],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, start_new_session=True,
                    )
                )  # fmt: skip
            if pod.process is not None:
                pod.process.poll()

    def _reap_helpers(self) -> None:
        self._helpers = [h for h in self._helpers if h.poll() is None]
