"""What the local backend keeps on disk to find its processes again after a restart.

One JSON file per run, ``<state dir>/<job id>/attempt-<n>/run.json``, beside the pods' working
directories ``pod-<rank>/``; written to a temporary file and renamed, so it is always whole. It
is written before any pod is started (the pods without a pid are the ones not started yet) and
again when a pid is known, a stop is asked for, and when the run ends (``outcome``): the file of
an ended run stays, so a launch of the same job and attempt reports that outcome again instead
of running the job twice.

Each pod's directory also holds what its wrapper writes (:mod:`.wrapper`): ``process`` (the
wrapper's pid and start time, the pod's claim) and ``exit-code``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
log = logging.getLogger("gpuaas.backends.local")


@dataclass(slots=True)
class PodRecord:
    """``pid`` is the wrapper's, also the id of the pod's process group; ``start`` its start
    time in clock ticks since boot; both None until the pod was started."""

    rank: int
    dir: str
    pid: int | None = None
    start: int | None = None
    container: str | None = None  # the container's name, for a container job
    #: what the wrapper runs and with which environment (kept so that a pod not started yet
    #: when the control plane stopped can be started after it restarts)
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Outcome:
    kind: str  # an EventKind value, or "cancelled"
    at: float
    reason: str = ""
    exit_code: int | None = None


@dataclass(slots=True)
class RunRecord:
    job_id: int
    attempt: int
    name: str
    master_port: int
    pods: list[PodRecord] = field(default_factory=list)
    container_runtime: str | None = None
    started_at: float | None = None  # when every pod was first seen running
    #: why the backend is stopping the run (a cancel, a failed or lost pod), and when to kill
    stopping: str | None = None
    kill_at: float | None = None  # wall-clock time of the SIGKILL
    failed_rank: int | None = None  # the pod whose end stopped the others
    outcome: Outcome | None = None

    @staticmethod
    def path(state_dir: Path, job_id: int, attempt: int) -> Path:
        return state_dir / str(job_id) / f"attempt-{attempt}" / RUN_FILE

    def save(self, state_dir: Path) -> None:
        path = self.path(state_dir, self.job_id, self.attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{RUN_FILE}.{os.getpid()}.tmp")
        # the pods' environments may hold secrets: readable by the server's user only
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(self), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        raw: dict[str, Any] = json.loads(path.read_text())
        pods = [PodRecord(**p) for p in raw.pop("pods", [])]
        outcome = raw.pop("outcome", None)
        return cls(pods=pods, outcome=Outcome(**outcome) if outcome else None, **raw)


def saved_runs(state_dir: Path) -> list[RunRecord]:
    """Every run recorded under ``state_dir``, by job and attempt; unreadable files skipped with a
    warning (a file is only ever replaced whole, so one can only be unreadable if edited by
    hand; a launch of that attempt is then reported lost, never run again)."""
    runs = []
    for path in sorted(state_dir.glob(f"*/attempt-*/{RUN_FILE}")):
        try:
            runs.append(RunRecord.load(path))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("%s is unreadable (%s): that run is not followed", path, exc)
            continue
    return sorted(runs, key=lambda r: (r.job_id, r.attempt))
