"""``bench api --rate``: the open loop against scripted servers and the real one.

The open loop plans request ``i`` at ``t0 + i / rate`` and measures its latency from that planned
time, so a server that stalls is charged for every request its stall held back, sent or not (no
coordinated omission). Scripted servers (as in ``test_bench_api_load.py``) check the schedule
and the charge; the real server checks that every acknowledged job is listed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import pytest
from scripted_server import load_against
from typer.testing import CliRunner

from gpuaas.cli.bench_api import TENANT, Outcome, connections_for
from gpuaas.cli.main import app

#: a handler gets the request's job number and the connection's writer, and answers (or not)
Handler = Callable[[int, asyncio.StreamWriter], Awaitable[None]]


def created(number: int) -> bytes:
    payload = json.dumps({"id": number + 1, "tenant": TENANT}, separators=(",", ":")).encode()
    return b"HTTP/1.1 201 Created\r\ncontent-length: %d\r\n\r\n%s" % (len(payload), payload)


async def open_loop(
    handler: Handler, *, jobs: int, rate: float, connections: int, timeout: float = 60.0
) -> tuple[Outcome, dict[int, float]]:
    """Run the open loop against a server that lets ``handler`` answer each request; also
    returns when (``time.time()``, the clock of ``Outcome.sent``) each job number reached the
    server."""
    arrived: dict[int, float] = {}

    async def answer(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> None:
        number = int(json.loads(body)["name"].removeprefix("bench-"))
        assert number not in arrived  # each job is sent once
        arrived[number] = time.time()
        await handler(number, writer)

    outcome = await load_against(
        answer, jobs=jobs, connections=connections, timeout=timeout, rate=rate
    )
    return outcome, arrived


def test_the_schedule_is_kept_on_a_fast_server() -> None:
    """Achieved rate = offered rate, and no request leaves before its planned time."""

    async def handler(number: int, writer: asyncio.StreamWriter) -> None:
        writer.write(created(number))

    rate, jobs = 200.0, 300
    outcome, arrived = asyncio.run(open_loop(handler, jobs=jobs, rate=rate, connections=8))
    assert outcome.created == jobs and not outcome.errors
    assert outcome.job_ids == set(range(1, jobs + 1))
    assert outcome.offered_rate == rate
    # the run lasts the schedule: (jobs - 1) / rate, plus the last answer, and not much more
    assert (jobs - 1) / rate <= outcome.elapsed < (jobs - 1) / rate + 0.5
    assert len(outcome.latencies) / outcome.elapsed == pytest.approx(rate, rel=0.15)
    epoch0 = min(outcome.sent)  # request 0's planned time; request i's is epoch0 + i / rate
    for number, at in arrived.items():  # never before its planned time (1 ms for the clocks)
        assert at >= epoch0 + number / rate - 0.001, number
    # a fast server needs few connections: the schedule, not the pool, sets the pace
    assert 1 <= outcome.connections <= 8


@pytest.mark.parametrize("connections", [4, 64])
def test_a_stall_is_charged_to_every_request_planned_during_it(connections: int) -> None:
    """The coordinated-omission test: the server answers nothing for 300 ms from job 20 on.

    A closed loop of 4 clients would record 4 slow requests and then simply send less; the open
    loop goes on planning 100 requests a second, and each request planned during the stall has
    a latency of at least the rest of the stall, whether it was sent and not answered (64
    connections) or could not leave for want of a connection (4)."""
    rate, jobs, stall = 100.0, 80, 0.3
    stalled_until = [0.0]

    async def handler(number: int, writer: asyncio.StreamWriter) -> None:
        if number == 20:
            stalled_until[0] = time.time() + stall
        wait = stalled_until[0] - time.time()
        if wait > 0:
            await asyncio.sleep(wait)
        writer.write(created(number))

    outcome, _ = asyncio.run(open_loop(handler, jobs=jobs, rate=rate, connections=connections))
    assert outcome.created == jobs and not outcome.errors
    # the planned send time (epoch) and latency of each answered request: answered at sent + lat
    planned = sorted(zip(outcome.sent, outcome.latencies, strict=True))
    epoch0 = planned[0][0]
    stall_start = epoch0 + 20 / rate
    stall_end = max(sent + lat for sent, lat in planned if sent <= stall_start + 1e-6)
    assert stall_end - stall_start >= stall - 0.01
    during = [(sent, lat) for sent, lat in planned if stall_start <= sent < stall_end - 0.01]
    assert len(during) >= 25  # ~30 requests planned in the 300 ms
    for sent, lat in during:  # each waited for the rest of the stall, counted from its plan
        assert lat >= stall_end - sent - 0.005
    assert max(outcome.latencies) >= stall - 0.01
    assert sum(lat >= 0.1 for lat in outcome.latencies) >= 18  # not 4
    if connections == 4:  # held back at the generator: late to leave, and counted
        assert outcome.late >= 20 and outcome.worst_late >= 0.2
        assert outcome.connections == 4
    else:  # sent on time, answered late
        assert outcome.connections > 4


def test_the_timeout_counts_from_the_send_not_the_plan() -> None:
    """Two connections, 0.35 s an answer, 12 requests in 0.24 s, a 1 s timeout (checked each
    second): the last requests held back are answered more than 1 s after their planned times
    but 0.35 s after being sent, so none times out (their latencies, from the plan, exceed it)."""

    async def handler(number: int, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.35)
        writer.write(created(number))

    outcome, _ = asyncio.run(open_loop(handler, jobs=12, rate=50.0, connections=2, timeout=1.0))
    assert not outcome.errors and outcome.created == 12
    assert max(outcome.latencies) > 1.0 and outcome.late >= 5


def test_a_dropped_connection_fails_its_request_and_the_schedule_goes_on() -> None:
    async def handler(number: int, writer: asyncio.StreamWriter) -> None:
        if number % 10 == 5:
            writer.transport.abort()
        else:
            writer.write(created(number))

    outcome, arrived = asyncio.run(open_loop(handler, jobs=60, rate=300.0, connections=4))
    assert sum(outcome.errors.values()) == 6 and outcome.created == 54
    assert sorted(arrived) == list(range(60))  # each job sent once, none retried


def test_open_loop_run_acknowledges_and_lists_every_job() -> None:
    """The real server, at a rate it keeps: every acknowledged job is listed."""
    result = CliRunner().invoke(
        app, ["bench", "api", "--rate", "100", "--jobs", "150", "--clients", "8", "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["mode"] == "open" and summary["offered_per_s"] == 100.0
    assert summary["errors"] == 0 and summary["missing"] == 0
    assert summary["acknowledged"] == summary["created"] == summary["listed"] == 150
    assert 0 < summary["p50_ms"] <= summary["p99_ms"] <= summary["p999_ms"] <= summary["max_ms"]
    assert {"late_to_leave", "worst_late_ms", "connections"} <= summary.keys()
    assert summary["server_cpu_ms_per_submission"] is not None
    assert summary["client_cpu_ms_per_submission"] is not None


@pytest.mark.parametrize(
    "rate, connections",
    [(None, 32), (10.0, 32), (64.0, 32), (65.0, 33), (800.0, 400), (5000.0, 1000)],
)
def test_the_default_connections_carry_a_half_second_stall(
    rate: float | None, connections: int
) -> None:
    """Closed loop: 32 clients. Open loop: a connection for each request planned in 0.5 s, so a
    server stall that long holds requests at the server, not in the generator; 32 to 1,000."""
    assert connections_for(rate) == connections
