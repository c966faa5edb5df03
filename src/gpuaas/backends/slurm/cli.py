"""The Slurm commands, for what slurmrestd cannot do on this release and when it is absent.

``sbatch`` submits (slurmrestd before API v0.0.39 cannot name nodes), ``squeue --json`` lists
every job in one call, ``sacct -c`` reads the job completion log for jobs slurmctld has
already forgotten, ``scancel`` cancels, ``scontrol show job -d`` tells which GPU indexes Slurm
gave a job on each node. ``SLURM_CONF`` (``conf``) points at the cluster's slurm.conf when the
control plane's host has none of its own. Like :class:`~.rest.SlurmRest`, a failure to reach
slurmctld raises :class:`~gpuaas.backends.base.BackendUnavailable` and a refusal
:class:`~.errors.SlurmRefused` with Slurm's words.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuaas.backends.base import BackendUnavailable
from gpuaas.backends.slurm.errors import SlurmRefused
from gpuaas.backends.slurm.hostlist import expand
from gpuaas.backends.slurm.version import Capabilities, parse_release

_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|Zero Bytes"
    r"|Could not establish a configuration source|Communication connection failure",
    re.IGNORECASE,
)
_GRES_LINE = re.compile(r"Nodes=(\S+).*?GRES=(\S+)")
_IDX = re.compile(r"\(IDX:([^)]*)\)")


class SlurmCli:
    def __init__(self, conf: str | None = None, timeout: float = 30.0) -> None:
        self.env = dict(os.environ)
        if conf:
            self.env["SLURM_CONF"] = conf
        self.timeout = timeout
        self._caps: Capabilities | None = None

    def run(self, *argv: str) -> str:
        """Run one Slurm command; its stdout, or the error that says what to do next."""
        try:
            done = subprocess.run(
                argv, env=self.env, capture_output=True, text=True, timeout=self.timeout
            )
        except FileNotFoundError as exc:
            raise BackendUnavailable(f"{argv[0]} is not installed on this host") from exc
        except subprocess.TimeoutExpired as exc:
            raise BackendUnavailable(f"{argv[0]} took over {self.timeout:g}s") from exc
        if done.returncode != 0:
            problem = _problem(done.stderr) or f"{argv[0]} exited {done.returncode}"
            if _UNREACHABLE.search(done.stderr):
                raise BackendUnavailable(f"{argv[0]}: {problem}")
            raise SlurmRefused(problem)
        return done.stdout

    def capabilities(self) -> Capabilities:
        if self._caps is None:
            self._caps = Capabilities(parse_release(self.run("sbatch", "--version")))
        return self._caps

    def submit(self, script: Path, options: list[str]) -> int:
        """``sbatch --parsable OPTIONS SCRIPT``: the Slurm job id."""
        out = self.run("sbatch", "--parsable", *options, str(script))
        first = out.strip().split(";")[0]
        if not first.isdigit():
            raise SlurmRefused(f"sbatch printed no job id: {out.strip()[:200]!r}")
        return int(first)

    def cancel(self, slurm_id: int) -> None:
        self.run("scancel", str(slurm_id))

    def jobs(self) -> list[dict[str, Any]]:
        """Every job slurmctld still knows, in slurmrestd's shape: one ``squeue`` call."""
        if not self.capabilities().squeue_json:
            raise BackendUnavailable(
                f"Slurm {self.capabilities().slurm} has no squeue --json (21.08+); "
                "configure slurmrestd"
            )
        return list(json.loads(self.run("squeue", "--json", "--states=all")).get("jobs") or [])

    def nodes(self) -> dict[str, Any]:
        return json.loads(self.run("sinfo", "--json"))

    def finished(self, slurm_ids: Iterable[int]) -> dict[int, tuple[str, int | None]]:
        """State and exit code of finished jobs from the completion log (``sacct -c``),
        one call for all ``slurm_ids``; jobs it has no record of are absent."""
        ids = sorted(set(slurm_ids))
        if not ids:
            return {}
        out = self.run(
            "sacct", "-c", "-n", "-P", "-o", "jobid,state,exitcode",
            "-j", ",".join(map(str, ids)),
        )  # fmt: skip
        return parse_sacct(out)

    def gres_indexes(self, slurm_id: int) -> dict[str, list[int]]:
        """The GPU indexes Slurm gave ``slurm_id`` on each node (``scontrol show job -d``)."""
        return parse_gres_lines(self.run("scontrol", "show", "job", "-d", str(slurm_id)))


def _problem(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    # sbatch says "error: Batch job submission failed: <why>": Slurm's why is the last line
    return lines[-1].removeprefix("sbatch: ").removeprefix("error: ") if lines else ""


def parse_sacct(text: str) -> dict[int, tuple[str, int | None]]:
    """``8|FAILED|3:0`` lines -> {8: ("FAILED", 3)}; a signal ``0:9`` gives 128 + 9."""
    found: dict[int, tuple[str, int | None]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or not parts[0].isdigit():
            continue  # job steps (8.batch) and blank lines
        code, _, signal = parts[2].partition(":")
        exit_code: int | None = None
        if signal.isdigit() and int(signal) > 0:
            exit_code = 128 + int(signal)
        elif code.isdigit():
            exit_code = int(code)
        found[int(parts[0])] = (parts[1].split()[0], exit_code)
    return found


def parse_gres_lines(text: str) -> dict[str, list[int]]:
    """``Nodes=n[2-3] CPU_IDs=0 Mem=100 GRES=gpu:h100:3(IDX:0-2)`` -> {n2: [0,1,2], n3: ...}."""
    found: dict[str, list[int]] = {}
    for match in _GRES_LINE.finditer(text):
        indexes = parse_indexes(match.group(2))
        for node in expand(match.group(1)):
            found[node] = indexes
    return found


def parse_indexes(gres: str) -> list[int]:
    """``gpu:h100:3(IDX:0-1,5)`` -> [0, 1, 5]; no IDX part -> []."""
    indexes: list[int] = []
    for group in _IDX.findall(gres):
        for item in group.split(","):
            low, _, high = item.partition("-")
            if low.isdigit():
                indexes.extend(range(int(low), int(high or low) + 1))
    return sorted(set(indexes))
