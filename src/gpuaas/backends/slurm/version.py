"""Which Slurm we drive, and what that version can do.

Slurm's command-line options and slurmrestd's API versions move between releases, and a
backend that uses an option its Slurm lacks fails at the worst moment (a submission). So the
backend asks once (slurmrestd's ``/slurm/<api>/ping`` or ``sbatch --version``), keeps a
:class:`Capabilities`, and every call that depends on a release asks it first. Known
differences used here:

- ``squeue --only-job-state`` exists from 23.11 only; ``squeue --json`` from 21.08.
- slurmrestd's job submission lacks ``required_nodes`` (a node list) before API v0.0.39
  (Slurm 23.02), and it ignores ``#SBATCH`` lines in the script, so on 22.05 a job placed on
  named nodes is submitted with ``sbatch``; slurmrestd still lists, cancels and imports.
- slurmrestd v0.0.38 refuses a submission without ``environment``.
- slurmrestd v0.0.38 reports ``exit_code`` as the raw wait status (``768`` is exit code 3,
  ``9`` is SIGKILL); v0.0.39 and later as an object with ``return_code`` and ``signal``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: slurmrestd API versions whose job and node shapes this backend reads, newest first.
SUPPORTED_APIS = ("v0.0.38", "v0.0.37")
_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_API = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")


@dataclass(frozen=True, order=True, slots=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"


def parse_release(text: str) -> SlurmVersion:
    """``22.05.8`` or ``slurm 22.05.8`` (``sbatch --version``); ValueError otherwise."""
    found = _RELEASE.search(text)
    if found is None:
        raise ValueError(f"not a Slurm version: {text.strip()!r}")
    return SlurmVersion(int(found.group(1)), int(found.group(2)), int(found.group(3) or 0))


def api_key(api: str) -> tuple[int, ...]:
    """``v0.0.38`` -> (0, 0, 38), for comparing API versions."""
    return tuple(int(part) for part in api.lstrip("v").split("."))


def offered_apis(paths: list[str]) -> list[str]:
    """The slurmrestd API versions named in an OpenAPI document's paths, newest first."""
    found = {m.group(1) for m in (_API.match(p) for p in paths) if m}
    return sorted(found, key=api_key, reverse=True)


def pick_api(offered: list[str]) -> str | None:
    """The newest API version both slurmrestd offers and this backend reads, or None."""
    for api in SUPPORTED_APIS:
        if api in offered:
            return api
    return None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the Slurm in front of us can do. ``api`` is None when slurmrestd is not used."""

    slurm: SlurmVersion
    api: str | None = None

    @property
    def squeue_only_job_state(self) -> bool:
        return self.slurm >= SlurmVersion(23, 11)

    @property
    def squeue_json(self) -> bool:
        return self.slurm >= SlurmVersion(21, 8)

    @property
    def rest_submits_node_lists(self) -> bool:
        """slurmrestd can place a submission on named nodes (``required_nodes``)."""
        return self.api is not None and api_key(self.api) >= (0, 0, 39)

    @property
    def rest_needs_environment(self) -> bool:
        return self.api is not None and api_key(self.api) <= (0, 0, 38)


def exit_code(raw: object) -> int | None:
    """A job's exit code from slurmrestd's ``exit_code`` in any API version: the raw wait
    status (v0.0.38: a signal is 128 + its number, as a shell reports it) or an object."""
    if isinstance(raw, dict):
        code = raw.get("return_code")
        signal = raw.get("signal") or {}
        number = signal.get("id") if isinstance(signal, dict) else None
        if isinstance(number, int) and number > 0:
            return 128 + number
        if isinstance(code, dict):  # v0.0.40+: {"set": true, "number": 3}
            code = code.get("number")
        return code if isinstance(code, int) else None
    if not isinstance(raw, int) or isinstance(raw, bool):
        return None
    if raw & 0x7F:
        return 128 + (raw & 0x7F)
    return (raw >> 8) & 0xFF


def job_state(raw: object) -> str:
    """``RUNNING`` from ``"RUNNING"`` (v0.0.38) or ``["RUNNING", "COMPLETING"]`` (v0.0.39+)."""
    if isinstance(raw, list):
        return str(raw[0]) if raw else "UNKNOWN"
    return str(raw or "UNKNOWN")
