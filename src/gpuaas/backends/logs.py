"""Where a job's output is kept: one folder per job and attempt, two files per pod.

``<root>/<job id>/attempt-<n>/pod-<rank>.out`` and ``.err``. Backends write there (a local
process's stdout and stderr, Slurm's ``--output`` / ``--error``), the API reads there
(``GET /v1/tenants/{t}/jobs/{id}/logs``), so neither needs the other to be running. On Slurm the
root must be on a file system the Slurm nodes and the control plane share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_ATTEMPT = re.compile(r"^attempt-(\d+)$")


@dataclass(frozen=True, slots=True)
class LogLayout:
    root: Path

    def attempt_dir(self, job_id: int, attempt: int) -> Path:
        return self.root / str(job_id) / f"attempt-{attempt}"

    def stdout(self, job_id: int, attempt: int, rank: int) -> Path:
        return self.attempt_dir(job_id, attempt) / f"pod-{rank}.out"

    def stderr(self, job_id: int, attempt: int, rank: int) -> Path:
        return self.attempt_dir(job_id, attempt) / f"pod-{rank}.err"

    def attempts(self, job_id: int) -> list[int]:
        """The attempts that left output, oldest first."""
        folder = self.root / str(job_id)
        if not folder.is_dir():
            return []
        found = (_ATTEMPT.fullmatch(p.name) for p in folder.iterdir())
        return sorted(int(m.group(1)) for m in found if m)
