"""Backend calls beside the admission step, so a slow or dead backend never freezes the scheduler.

A reconciler step decides in memory and stores in one transaction; starting a process, talking
to slurmctld or to a Kubernetes API server may take seconds or fail. So each backend whose calls
may block (``blocking``, true unless the backend says otherwise) gets a :class:`BackendDriver`:
a thread of its own that carries out launches and cancels in the order the reconciler queued
them, polls the backend every ``poll_interval`` seconds, and hands the events it reported to the
next step. The step only queues and collects; it never waits on a backend.

A call that raises :class:`~gpuaas.backends.base.BackendUnavailable` marks the backend down
(the reason is shown on the jobs waiting for it, ``gpuaas_backend_up`` drops to 0) and is
retried, in order, after ``retry_interval``; the calls after it wait behind it, so a cancel
never overtakes the launch it cancels. A launch that fails any other way becomes a
:attr:`~gpuaas.backends.base.EventKind.REJECTED` event for its job: a backend's bug must not
leave a job admitted forever.

A backend that never blocks (the simulated fleet: in memory, on the step's own clock) is called
inline, with the step's ``now``, exactly as before: tests and the simulator stay deterministic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuaas.backends.base import (
    DEFAULT_GRACE,
    Backend,
    BackendEvent,
    BackendJob,
    BackendUnavailable,
    EventKind,
)
from gpuaas.service.telemetry import Telemetry

log = logging.getLogger("gpuaas.backends")


@dataclass(frozen=True, slots=True)
class _Call:
    """One queued call: ``job_id`` for the events a failure turns into."""

    kind: str  # "launch" | "cancel" | "checkpoint" | "adopt"
    job_id: int
    run: Callable[[], None]


class BackendDriver:
    """One backend's calls, inline or on a thread of their own (see the module docstring)."""

    def __init__(
        self,
        backend: Backend,
        telemetry: Telemetry,
        poll_interval: float = 0.5,
        retry_interval: float = 1.0,
    ) -> None:
        self.backend = backend
        self.telemetry = telemetry
        self.poll_interval = poll_interval
        self.retry_interval = retry_interval
        self.inline = not getattr(backend, "blocking", True)
        self._calls: deque[_Call] = deque()
        self._events: list[BackendEvent] = []
        self._following: set[int] = set()
        self._error: str | None = None
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self._thread: threading.Thread | None = None
        self.telemetry.backend_up.labels(backend.name).set(1)

    @property
    def name(self) -> str:
        return self.backend.name

    # --- what the reconciler's step calls (never waits on the backend) ---------------------

    def launch(self, job: BackendJob) -> None:
        self._following.add(job.id)
        if self.inline:
            self.backend.launch(job)
            return
        self._queue(_Call("launch", job.id, lambda: self.backend.launch(job)))

    def cancel(self, job_id: int, grace: float = DEFAULT_GRACE) -> None:
        self._following.discard(job_id)
        if self.inline:
            self.backend.cancel(job_id, grace)
            return
        self._queue(_Call("cancel", job_id, lambda: self.backend.cancel(job_id, grace)))

    def checkpoint(self, job_id: int, grace: float) -> None:
        """Send ``job_id`` its checkpoint signal, stopping it for good ``grace`` seconds later
        (the idle pool's reclaim): the backend's ``checkpoint`` where it has one, else its
        ``cancel`` with that grace. The job stays followed: it is still admitted until the
        service evicts it, and a rebuild meanwhile must not launch it again."""
        call = getattr(self.backend, "checkpoint", None)
        if call is None:
            call = self.backend.cancel
        if self.inline:
            call(job_id, grace)
            return
        self._queue(_Call("checkpoint", job_id, lambda: call(job_id, grace)))

    def adopt(self, active: Iterable[int]) -> None:
        """After a (re)build: stop whatever the backend still runs that is no longer active
        (cancelled or finished while no one led); the active jobs are launched again by the
        caller with their start times, so the backend resumes following them."""
        keep = set(active)
        self._following &= keep
        if self.inline:
            for job_id in self.backend.running() - keep:
                self.backend.cancel(job_id)
            return

        def stop_strays() -> None:
            for job_id in self.backend.running() - keep:
                self.backend.cancel(job_id)

        self._queue(_Call("adopt", 0, stop_strays))

    def following(self) -> set[int]:
        """The jobs this driver was asked to run and has not been told to stop or seen end."""
        return set(self.backend.running()) if self.inline else set(self._following)

    def events(self, now: float) -> list[BackendEvent]:
        """What the backend reported since the last call (inline: polled now, at ``now``)."""
        if self.inline:
            events = self.backend.poll(now)
        else:
            self._ensure_thread()
            with self._lock:
                events, self._events = self._events, []
        for event in events:
            if event.kind is not EventKind.STARTED:
                self._following.discard(event.job_id)
        return events

    @property
    def error(self) -> str | None:
        """Why the backend cannot be reached now (None while it answers)."""
        return self._error

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        close = getattr(self.backend, "close", None)
        if callable(close):
            close()

    # --- the driver's thread ---------------------------------------------------------------

    def _queue(self, call: _Call) -> None:
        self._ensure_thread()
        with self._lock:
            self._calls.append(call)
            self._wake.notify_all()

    def _ensure_thread(self) -> None:
        if self._thread is None and not self.inline:
            self._stop = False
            self._thread = threading.Thread(
                target=self._loop, name=f"gpuaas-backend-{self.name}", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        polled_at = -float("inf")
        while True:
            with self._lock:
                if self._stop:
                    return
            delay = self._run_calls()
            if delay == 0 and time.monotonic() - polled_at >= self.poll_interval:
                polled_at = time.monotonic()
                ok, events = self._timed("poll", self.backend.poll, time.time())
                if not ok:
                    delay = self.retry_interval
                else:
                    with self._lock:
                        self._events.extend(events or ())
            with self._lock:
                if self._stop:
                    return
                if not self._calls or delay:
                    self._wake.wait(delay or self.poll_interval)

    def _run_calls(self) -> float:
        """Carry out the queued calls in order; the seconds to wait when the backend is down."""
        while True:
            with self._lock:
                if not self._calls or self._stop:
                    return 0.0
                call = self._calls[0]
            try:
                ok, _ = self._timed(call.kind, call.run)
            except Exception as exc:  # a backend's bug: never leave the job admitted forever
                log.exception("%s backend: %s of job %s failed", self.name, call.kind, call.job_id)
                if call.kind == "launch":
                    rejected = BackendEvent(call.job_id, EventKind.REJECTED, time.time(),
                                            f"{type(exc).__name__}: {exc}")  # fmt: skip
                    with self._lock:
                        self._events.append(rejected)
                ok = True
            if not ok:  # unavailable: retry the same call later, in order
                return self.retry_interval
            with self._lock:
                self._calls.popleft()

    def _timed(self, call: str, fn: Callable[..., Any], *args: object) -> tuple[bool, Any]:
        """``(True, fn(*args))``, measured; ``(False, None)`` (and the backend marked down)
        when it is unavailable. Other exceptions propagate to the caller."""
        labels = (self.name, call)
        started = time.perf_counter()
        try:
            result = fn(*args)
        except BackendUnavailable as exc:
            if self._error is None:
                log.warning("%s backend unavailable: %s", self.name, exc)
            self._error = str(exc) or type(exc).__name__
            self.telemetry.backend_up.labels(self.name).set(0)
            self.telemetry.backend_calls.labels(*labels, "unavailable").inc()
            return False, None
        except Exception:
            self.telemetry.backend_calls.labels(*labels, "error").inc()
            raise
        finally:
            self.telemetry.backend_call_seconds.labels(*labels).observe(
                time.perf_counter() - started
            )
        if self._error is not None:
            log.info("%s backend reachable again", self.name)
        self._error = None
        self.telemetry.backend_up.labels(self.name).set(1)
        self.telemetry.backend_calls.labels(*labels, "ok").inc()
        return True, result
