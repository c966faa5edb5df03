"""``gpuaas bench metering``: what recording usage costs ``bench api``, measured so that a
noisy shared machine can still show it (docs/benchmarks.md).

One run is ``bench api``'s: a real ``gpuaas serve`` (SQLite, the reconciler on over the
simulated fleet, one-GPU jobs short enough that admissions and completions, each of which
writes usage, go on while submissions arrive), ``--jobs`` submissions from ``--clients``
connections. Runs alternate metering on and off (``gpuaas serve --no-metering``) in the
order on, off, off, on, on, off, ... (ABBA: a load that drifts over the window weighs on
both arms alike) for ``--rounds`` pairs, back to back. Per run: submissions per second, and
the **server's CPU time** (the process and its children, from ``/proc``: utime + stime)
over the submission window, per submission and per job transition the server made in it
(admissions and completions, which is where metering writes). CPU time is what the load of
other processes changes least: it counts the server's own work, not its waiting for a core.

The figures: the ratio of the median throughputs (on / off; the target is >= 0.95) and of
the median CPU times per submission (on / off; <= 1.05 is the same target in CPU). Between
runs the load moves, so ``--profile`` adds a measurement within one run: a metering-on run
with py-spy sampling the server's processes (``--subprocesses``, 100 Hz, ``--gil``: only
the thread holding the GIL, i.e. running Python, not one waiting for a lock, the disk or a
core): the share of samples with a metering frame on the stack is metering's share of the
server's Python CPU whatever the machine's load did (SQLite's own work inside a metering
call releases the GIL and is not counted; py-spy's own cost lands on that run only, which
is why it is not one of the A/B runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from gpuaas.cli.bench import bench_app
from gpuaas.cli.bench_api import (
    GPUS_PER_NODE,
    BenchError,
    Server,
    list_every_job,
    set_up_tenant,
    submit_all,
    write_fleet,
)
from gpuaas.client.sdk import Client

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its live descendants (0 for a
    process that is gone); Linux ``/proc`` only."""
    total = 0.0
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in task.read_text().split()]
    return total


def transitions(states: dict[int, str]) -> int:
    """Usage-writing transitions behind the listed states: a job that got past Pending was
    admitted (opens its usage); one that finished after that closed it."""
    out = 0
    for state in states.values():
        if state != "Pending":
            out += 1
        if state in ("Succeeded", "Failed", "Cancelled"):
            out += 1
    return out


def py_spy() -> str | None:
    """The py-spy next to this Python (the project's venv has it), or on the PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def metering_share(raw: str) -> tuple[int, int]:
    """Of py-spy's raw (collapsed) samples: how many have a metering frame on their stack
    (``service/usage.py``, ``service/usage_volumes.py``, ``billing/metering.py``,
    ``billing/skus.py``; not while a process imports them), and how many there are
    (samples of the GIL's holder only)."""
    marks = ("service/usage.py:", "service/usage_volumes.py:", "billing/metering.py:",
             "billing/skus.py:")  # fmt: skip
    ours = every = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        every += int(count)
        frames = [f for f in stack.split(";") if any(mark in f for mark in marks)]
        if frames and not frames[0].startswith("<module>"):  # importing them is no recording
            ours += int(count)
    return ours, every


def one_run(
    metering: bool, jobs: int, clients: int, nodes: int, duration: float,
    profile: bool = False, keep: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-metering-") as tmp:
        workdir = Path(tmp)
        db_url = f"sqlite:///{workdir / 'bench.db'}"
        server = Server(db_url, workdir, write_fleet(workdir, nodes), True, metering)
        server.start()
        try:
            with Client(server.url, server.admin_token) as admin:
                token = set_up_tenant(admin, nodes * GPUS_PER_NODE)
            assert server.process is not None
            pid = server.process.pid
            load = os.getloadavg()[0]
            spy, raw = None, workdir / "profile.txt"
            if profile:
                spy = subprocess.Popen(
                    [py_spy() or "py-spy", "record", "--pid", str(pid), "--subprocesses",
                     "--gil", "--nonblocking", "-r", "100", "-f", "raw", "-o", str(raw)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            cpu0, wall0 = tree_cpu(pid), time.perf_counter()
            with Progress(transient=True, console=Console(stderr=True)) as progress:
                outcome = asyncio.run(submit_all(server.url, token, pid, clients, jobs,
                                                 duration, progress))  # fmt: skip
            cpu, wall = tree_cpu(pid) - cpu0, time.perf_counter() - wall0
            sampled = None
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its samples and exits
                try:
                    spy.wait(60)
                except subprocess.TimeoutExpired:
                    spy.kill()
                    spy.wait()
                sampled = metering_share(raw.read_text()) if raw.exists() else (0, 0)
                if keep is not None and raw.exists():
                    shutil.copyfile(raw, keep)
            states = list_every_job(server.url, token)
        finally:
            server.stop()
    done = len(outcome.latencies)
    moved = transitions(states)
    extra: dict[str, Any] = {}
    if sampled is not None:
        ours, every = sampled
        share = round(ours / every, 4) if every else None
        extra = {"profile_samples": every, "metering_samples": ours,
                 "metering_share_of_server_cpu": share}  # fmt: skip
    return {
        **extra,
        "metering": metering,
        "submissions_per_s": round(done / outcome.elapsed, 2) if outcome.elapsed else 0.0,
        "server_cpu_s": round(cpu, 2),
        "server_cpu_ms_per_submission": round(1000 * cpu / done, 2) if done else None,
        "transitions": moved,
        "wall_s": round(wall, 1),
        "errors": sum(outcome.errors.values()),
        "load_1min": round(load, 1),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def median(metering: bool, key: str) -> float:
        return statistics.median(r[key] for r in runs if r["metering"] is metering)

    on_rate, off_rate = median(True, "submissions_per_s"), median(False, "submissions_per_s")
    on_cpu = median(True, "server_cpu_ms_per_submission")
    off_cpu = median(False, "server_cpu_ms_per_submission")
    return {
        "median_submissions_per_s": {"on": on_rate, "off": off_rate},
        "throughput_ratio_on_off": round(on_rate / off_rate, 3) if off_rate else None,
        "median_server_cpu_ms_per_submission": {"on": on_cpu, "off": off_cpu},
        "cpu_ratio_on_off": round(on_cpu / off_cpu, 3) if off_cpu else None,
        "median_transitions": {
            "on": median(True, "transitions"),
            "off": median(False, "transitions"),
        },
    }


@bench_app.command("metering")
def bench_metering(
    rounds: Annotated[
        int, typer.Option("--rounds", min=0, max=20, help="on/off pairs (0: --profile only)")
    ] = 3,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="submissions per run")] = 1000,
    clients: Annotated[int, typer.Option("--clients", min=1, max=1000)] = 16,
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=1000)] = 4,
    duration: Annotated[
        float, typer.Option("--duration", min=0.1, help="each job's simulated run time (s)")
    ] = 1.0,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="then one more metering-on run sampled by py-spy: the "
            "share of the server's CPU spent in metering, within one run",
        ),
    ] = False,
    profile_out: Annotated[
        Path | None, typer.Option("--profile-out", help="keep py-spy's raw samples here")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Interleaved `bench api` runs with usage recording on and off: throughput and the
    server's CPU time per submission, ratio of the medians."""
    err = Console(stderr=True)
    runs: list[dict[str, Any]] = []
    for i in range(rounds):
        order = (True, False) if i % 2 == 0 else (False, True)  # on off | off on | ...
        for metering in order:
            err.print(f"run {len(runs) + 1}/{2 * rounds}: metering {'on' if metering else 'off'}")
            try:
                runs.append(one_run(metering, jobs, clients, nodes, duration))
            except BenchError as exc:
                err.print(f"error: {exc}", markup=False)
                raise typer.Exit(1) from None
    result = {"runs": runs, **(summary(runs) if runs else {}), "jobs": jobs, "clients": clients,
              "fleet": f"{nodes} nodes x {GPUS_PER_NODE} H100", "duration_s": duration}  # fmt: skip
    if profile:
        err.print("profiled run: metering on, py-spy sampling the server")
        result["profiled"] = one_run(True, jobs, clients, nodes, duration, profile=True,
                                     keep=profile_out)  # fmt: skip
    if as_json:
        typer.echo(json.dumps(result))
        return
    if not runs:
        typer.echo(json.dumps(result.get("profiled")))
        return
    table = Table(title=f"bench api with and without metering: {jobs} submissions per run")
    for column in ("run", "metering", "submissions/s", "server CPU", "CPU ms/submission",
                   "transitions", "load"):  # fmt: skip
        table.add_column(column, justify="right")
    for i, r in enumerate(runs, 1):
        table.add_row(str(i), "on" if r["metering"] else "off", str(r["submissions_per_s"]),
                      f"{r['server_cpu_s']} s", str(r["server_cpu_ms_per_submission"]),
                      str(r["transitions"]), str(r["load_1min"]))  # fmt: skip
    Console().print(table)
    typer.echo(
        f"throughput on/off (medians): {result['throughput_ratio_on_off']} (target >= 0.95); "
        f"server CPU per submission on/off: {result['cpu_ratio_on_off']} (<= 1.05)"
    )
    if profile:
        share = result["profiled"].get("metering_share_of_server_cpu")
        typer.echo(f"profiled run: metering's share of the server's sampled CPU: {share}")
