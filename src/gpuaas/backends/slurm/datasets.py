"""Dataset caches on the Slurm nodes: the copying and checking run on the node, as Slurm jobs.

On a Slurm cluster a node's dataset cache is a directory on that node's own disk (``root``,
``GPUAAS_SLURM_DATASET_CACHE``, default ``/var/cache/gpuaas/datasets``; the layout and the check
are :class:`~gpuaas.backends.dataset_cache.NodeCaches`'). The control plane never touches it:
whatever must happen there is a small batch job pinned to the node (``sbatch --nodelist=NODE``,
one task, one CPU, no GPU) that runs ``python -m gpuaas.backends.dataset_cache`` (``command``,
``GPUAAS_SLURM_DATASET_COMMAND``: the same program on the nodes) and writes its answer to a
report file in ``work``, a folder of the log root the nodes and the control plane share:

- a **preload** (:meth:`fill`) copies the files into the node's cache (or finds them there,
  checked) and reports the bytes held; until the report is there the service is told "not
  known yet" and the cache stays ``loading``;
- the periodic **check** (:meth:`check`) checks the files there: a cache whose files are gone
  is forgotten once the job has said so;
- an **eviction** (:meth:`evict`) deletes the copy; nobody waits for it;
- a gpuaas job that reads a dataset fills each of its nodes' caches itself before its pods
  run (a step of its batch script, :func:`fill_lines`), writing a report per node into its
  attempt folder; when the job succeeds the backend reads those reports (:meth:`reported`), and
  the service's question "does that node hold it now" (:meth:`held`) is answered from them.

A node job that ends without a report (the program is missing there, the job was cancelled)
fails the preload with Slurm's state; one that Slurm refuses fails it with Slurm's words.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuaas.backends.base import BackendUnavailable
from gpuaas.backends.dataset_cache import CacheError, NodeCaches, local_source
from gpuaas.backends.slurm.cli import SlurmCli
from gpuaas.backends.slurm.errors import SlurmRefused

log = logging.getLogger("gpuaas.backends.slurm")

DEFAULT_ROOT = Path("/var/cache/gpuaas/datasets")
#: Slurm states in which a node job has ended (with no report: it failed)
_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
          "BOOT_FAIL", "DEADLINE", "PREEMPTED"}  # fmt: skip
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_Key = tuple[str, str, str, str, str]  # op, node, tenant, dataset, uri
#: seconds a check's answer stands (less than the service's 30 s between check rounds)
ANSWER_TTL = 20.0


def default_command() -> list[str]:
    """The program the node jobs run: this Python's, the same gpuaas installed on the nodes."""
    return [sys.executable, "-m", "gpuaas.backends.dataset_cache"]


@dataclass(slots=True)
class _NodeJob:
    slurm_id: int
    report: Path


class SlurmNodeCaches:
    """See the module docstring: a :class:`~gpuaas.backends.dataset_cache.NodeCacheAgent`."""

    def __init__(
        self,
        cli: SlurmCli,
        work: Path,
        root: Path = DEFAULT_ROOT,
        command: Sequence[str] | None = None,
        partition: str | None = None,
        prefix: str = "gpuaas",
    ) -> None:
        self.cli = cli
        self.work = Path(work)
        self.root = Path(root)
        self.layout = NodeCaches(self.root)  # paths only: the files are on the nodes
        self.command = list(command or default_command())
        self.partition = partition
        self.prefix = prefix
        self._lock = threading.Lock()
        self._asked: dict[_Key, _NodeJob] = {}
        #: recent answers of checks: a check round asks until every node has answered, and
        #: a node that answered early is not asked again in the same round
        self._answered: dict[_Key, tuple[float, dict]] = {}
        #: (node, tenant, dataset) -> (uri, bytes) reported by a succeeded job's fill step
        self._reported: dict[tuple[str, str, str], tuple[str, int]] = {}

    # --- the agent ---------------------------------------------------------------------------

    def fill(self, node: str, tenant: str, dataset: str, uri: str) -> int | None:
        local_source(uri)  # a dataset with no path is refused here, without a job
        answer = self._ask("fill", node, tenant, dataset, uri)
        if answer is None:
            return None
        if not answer.get("ok"):
            raise CacheError(str(answer.get("error") or "the node job failed"))
        return int(answer.get("bytes") or 0)

    def check(self, node: str, tenant: str, dataset: str, uri: str) -> bool | None:
        try:
            answer = self._ask("check", node, tenant, dataset, uri)
        except CacheError as exc:  # the check could not run: say nothing about the files
            log.warning("checking dataset %s on %s: %s", dataset, node, exc)
            return None
        return None if answer is None else bool(answer.get("ok"))

    def held(self, node: str, tenant: str, dataset: str, uri: str) -> int | None:
        with self._lock:
            found = self._reported.pop((node, tenant, dataset), None)
        if found is None or found[0] != uri:
            return None
        return found[1]

    def evict(self, node: str, tenant: str, dataset: str) -> None:
        try:
            self._submit("evict", node, tenant, dataset, "")
        except (CacheError, BackendUnavailable) as exc:
            log.warning("evicting dataset %s on %s: %s", dataset, node, exc)

    def data_path(self, node: str, tenant: str, dataset: str) -> Path:
        """Where a job on ``node`` reads the copy (a path on that node)."""
        return self.layout.data_path(node, tenant, dataset)

    # --- a gpuaas job that reads a dataset ----------------------------------------------------

    def fill_lines(self, tenant: str, dataset: dict[str, Any], folder: Path) -> list[str]:
        """The batch script's step that fills the cache of every node of the job (one task
        per node) before the pods run; each node's answer goes to ``dataset-<node>.json`` in
        the job's attempt folder. CacheError when the dataset has no path."""
        local_source(str(dataset["uri"]))
        self.layout.place("node", tenant, str(dataset["name"]))  # names fit a directory
        argv = [*self.command, "fill", "--root", str(self.root), "--tenant", tenant,
                "--dataset", str(dataset["name"]), "--uri", str(dataset["uri"]),
                "--report", str(folder / "dataset-%N.json")]  # fmt: skip
        return [
            f"# fill each node's dataset cache first (docs/datasets.md): {dataset['name']}",
            "srun --export=ALL --ntasks-per-node=1 --cpus-per-task=1 " + shlex.join(argv)
            + " || exit $?",
        ]  # fmt: skip

    def task_lines(self, tenant: str, dataset: dict[str, Any]) -> list[str]:
        """The pod's environment: the dataset's name and its copy on the pod's node."""
        where = self.root / "${SLURMD_NODENAME}" / tenant / str(dataset["name"]) / "data"
        return [
            f"export GPUAAS_DATASET={shlex.quote(str(dataset['name']))}",
            f'export GPUAAS_DATASET_DIR="{where}"',
        ]

    def reported(self, tenant: str, dataset: dict[str, Any], folder: Path) -> None:
        """A job that read ``dataset`` succeeded: take its nodes' fill reports."""
        for path in sorted(folder.glob("dataset-*.json")):
            try:
                answer = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if answer.get("ok") and answer.get("node"):
                key = (str(answer["node"]), tenant, str(dataset["name"]))
                with self._lock:
                    self._reported[key] = (str(dataset["uri"]), int(answer.get("bytes") or 0))

    # --- node jobs ----------------------------------------------------------------------------

    def _ask(self, op: str, node: str, tenant: str, dataset: str, uri: str) -> dict | None:
        """The answer of the node job for this question, submitting it first; None while it
        runs. CacheError when Slurm refuses it or it ended with no answer."""
        key = (op, node, tenant, dataset, uri)
        with self._lock:
            asked = self._asked.get(key)
            recent = self._answered.get(key)
        if recent is not None and time.monotonic() - recent[0] < ANSWER_TTL:
            return recent[1]
        if asked is None:
            try:
                self._submit(op, node, tenant, dataset, uri)
            except BackendUnavailable:
                return None  # Slurm cannot be reached now: asked again at a later step
            return None
        answer = _read(asked.report)
        if answer is None:
            state = self._state(asked.slurm_id)
            if state not in _ENDED:
                return None
            answer = _read(asked.report)  # written just before the job ended
            if answer is None:
                with self._lock:
                    self._asked.pop(key, None)
                raise CacheError(
                    f"Slurm job {asked.slurm_id} on node {node} ended {state} with no answer "
                    f"(see {asked.report.with_suffix('.out')})"
                )
        with self._lock:
            self._asked.pop(key, None)
            if op == "check":
                now = time.monotonic()
                self._answered = {
                    k: v for k, v in self._answered.items() if now - v[0] < ANSWER_TTL
                }
                self._answered[key] = (now, answer)
        for path in (
            asked.report,
            asked.report.with_suffix(".sh"),
            asked.report.with_suffix(".out"),
        ):
            path.unlink(missing_ok=True)
        return answer

    def _submit(self, op: str, node: str, tenant: str, dataset: str, uri: str) -> None:
        self.layout.place(node, tenant, dataset)  # names that fit a directory, or CacheError
        self.work.mkdir(parents=True, exist_ok=True)
        stem = f"{op}-{node}-{tenant}-{dataset}-{uuid.uuid4().hex[:8]}"
        report = self.work / f"{stem}.json"
        argv = [*self.command, op, "--root", str(self.root), "--node", node,
                "--tenant", tenant, "--dataset", dataset, "--report", str(report)]  # fmt: skip
        if uri:
            argv += ["--uri", uri]
        script = self.work / f"{stem}.sh"
        script.write_text(f"#!/bin/bash\n# gpuaas: {op} dataset {dataset} on {node}\n"
                          f"export PATH={_PATH}\nexec {shlex.join(argv)}\n")  # fmt: skip
        options = [
            f"--job-name={self.prefix}-data-{op}",
            f"--comment={self.prefix} dataset {tenant}/{dataset} {op} on {node}",
            f"--nodelist={node}",
            "--nodes=1",
            "--ntasks=1",
            "--cpus-per-task=1",
            "--mem=256",
            f"--chdir={self.work}",
            f"--output={report.with_suffix('.out')}",
            "--export=NONE",
            "--no-requeue",
        ]
        if self.partition:
            options.append(f"--partition={self.partition}")
        try:
            slurm_id = self.cli.submit(script, options)
        except SlurmRefused as exc:
            raise CacheError(f"Slurm refused the {op} job on node {node}: {exc}") from None
        if op != "evict":
            with self._lock:
                self._asked[(op, node, tenant, dataset, uri)] = _NodeJob(slurm_id, report)

    def _state(self, slurm_id: int) -> str:
        """Slurm's state of a node job; ``COMPLETED`` once slurmctld has forgotten it."""
        try:
            out = self.cli.run("squeue", "-h", "-j", str(slurm_id), "-o", "%T", "--states=all")
        except SlurmRefused:  # "Invalid job id": long gone
            return "COMPLETED"
        except BackendUnavailable:
            return "UNKNOWN"
        return out.strip().split()[0] if out.strip() else "COMPLETED"


def _read(path: Path) -> dict | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None
