"""``bench api``'s load generator against scripted servers: what it sends, what it counts, and
that a latency runs from the request's first byte written to the answer's last byte read.

The real server is exercised by ``test_bench_api.py``; here a small asyncio server answers as
each test says (refusals, slow or split answers, dropped connections, unframed answers), so the
generator's bookkeeping is checked against answers the real server would rarely give."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scripted_server import load, load_against

from gpuaas.cli.bench_api import (
    TENANT,
    Outcome,
    RequestTemplate,
    answer_head,
    job_id_of,
    job_spec,
)

#: a handler gets the request's body and the connection's writer, and answers (or not)
Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


def answer(status: int, body: dict[str, object], *, close: bool = False) -> bytes:
    payload = json.dumps(body, separators=(",", ":")).encode()
    head = f"HTTP/1.1 {status} X\r\ncontent-length: {len(payload)}\r\n"
    head += "content-type: application/json\r\n"
    if close:
        head += "connection: close\r\n"
    return head.encode() + b"\r\n" + payload


def created(body: bytes) -> bytes:
    """A 201 naming the job by its number (``bench-N``), with ``id`` first as the server has it."""
    number = int(json.loads(body)["name"].removeprefix("bench-"))
    return answer(201, {"id": number + 1, "tenant": TENANT, "state": "Pending"})


async def serve_and_load(
    handler: Handler, jobs: int, clients: int, timeout: float = 60.0
) -> tuple[Outcome, list[bytes]]:
    """Run the generator against a server that reads each request and lets ``handler`` answer;
    also returns the requests' heads."""
    heads: list[bytes] = []

    async def answer(head: bytes, body: bytes, writer: asyncio.StreamWriter) -> None:
        heads.append(head)
        await handler(body, writer)

    outcome = await load_against(answer, jobs=jobs, connections=clients, timeout=timeout)
    return outcome, heads


def run(handler: Handler, jobs: int, clients: int = 4, timeout: float = 60.0) -> Outcome:
    return asyncio.run(serve_and_load(handler, jobs, clients, timeout))[0]


@given(st.integers(min_value=0, max_value=10**9))
def test_a_rendered_request_is_the_job_spec_as_json_dumps_writes_it(index: int) -> None:
    template = RequestTemplate.for_run("127.0.0.1:8000", "gpa_x", "run1", 30.0)
    request = template.render(index)
    head, _, body = request.partition(b"\r\n\r\n")
    assert body == json.dumps(job_spec("run1", index, 30.0)).encode()
    lines = head.decode().split("\r\n")
    assert lines[0] == f"POST /v1/tenants/{TENANT}/jobs HTTP/1.1"
    assert f"Content-Length: {len(body)}" in lines
    assert "Authorization: Bearer gpa_x" in lines and "Content-Type: application/json" in lines


@pytest.mark.parametrize(
    "body", [b'{"id":42,"tenant":"t"}', b'{"tenant":"t","id":42}', b'{"id": 42}', b'{"id":42}']
)
def test_the_job_id_is_read_whatever_the_order_of_the_fields(body: bytes) -> None:
    assert job_id_of(body) == 42


def test_an_answer_head_gives_status_length_and_keep_alive() -> None:
    head = b"HTTP/1.1 201 Created\r\nContent-Type: x\r\nContent-Length: 17\r\nDate: y"
    assert answer_head(head) == (201, 17, True)
    assert answer_head(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close")[2] is False


def test_every_job_is_sent_once_on_keep_alive_connections() -> None:
    async def handler(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(created(body))

    outcome, heads = asyncio.run(serve_and_load(handler, jobs=300, clients=5))
    assert outcome.created == 300 and not outcome.errors
    assert outcome.job_ids == set(range(1, 301))  # each job number once
    assert len(outcome.latencies) == len(outcome.sent) == len(heads) == 300
    assert outcome.client_cpu is not None and outcome.client_cpu > 0


def test_refused_submissions_are_errors_and_not_acknowledged() -> None:
    async def handler(body: bytes, writer: asyncio.StreamWriter) -> None:
        number = int(json.loads(body)["name"].removeprefix("bench-"))
        if number % 3 == 0:
            writer.write(answer(422, {"title": "Unprocessable", "detail": "queue: no such queue"}))
        elif number % 3 == 1:
            writer.write(answer(200, {"id": 10_000 + number}))  # a replayed key
        else:
            writer.write(created(body))

    outcome = run(handler, jobs=90)
    assert outcome.errors == {"422: queue: no such queue": 30}
    assert outcome.created == 30 and outcome.replayed == 30 and len(outcome.job_ids) == 60
    assert len(outcome.latencies) == 90  # a refusal is answered, and timed


def test_a_2xx_without_a_job_id_is_an_error() -> None:
    async def handler(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(answer(201, {"tenant": TENANT}))

    outcome = run(handler, jobs=5)
    assert sum(outcome.errors.values()) == 5 and not outcome.job_ids and outcome.created == 0


def test_latency_runs_to_the_answers_last_byte() -> None:
    """The answer's head comes at once, its last byte 80 ms later: every latency covers both."""

    async def handler(body: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.04)
        whole = created(body)
        writer.write(whole[:-5])
        await writer.drain()
        await asyncio.sleep(0.08)
        writer.write(whole[-5:])

    outcome = run(handler, jobs=12, clients=3)
    assert outcome.created == 12 and not outcome.errors
    assert min(outcome.latencies) >= 0.12
    assert max(outcome.latencies) < 5.0
    # a closed loop of 3 clients, 4 requests each of at least 0.12 s
    assert outcome.elapsed >= 4 * 0.12


def test_a_dropped_connection_fails_its_request_and_the_client_goes_on() -> None:
    async def handler(body: bytes, writer: asyncio.StreamWriter) -> None:
        number = int(json.loads(body)["name"].removeprefix("bench-"))
        if number % 10 == 5:
            writer.transport.abort()  # no answer at all
        else:
            writer.write(created(body))

    outcome = run(handler, jobs=100)
    assert sum(outcome.errors.values()) == 10
    assert outcome.created == 90 and len(outcome.latencies) == 90


def test_connection_close_is_honoured_and_the_client_reconnects() -> None:
    async def handler(body: bytes, writer: asyncio.StreamWriter) -> None:
        number = int(json.loads(body)["name"].removeprefix("bench-"))
        writer.write(answer(201, {"id": number + 1}, close=True))
        await writer.drain()
        writer.close()

    outcome = run(handler, jobs=40)
    assert outcome.created == 40 and not outcome.errors


def test_an_unframed_answer_is_an_error_not_a_hang() -> None:
    async def handler(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
        )

    outcome = run(handler, jobs=6, clients=2)
    assert sum(outcome.errors.values()) == 6 and not outcome.latencies
    assert all("Content-Length" in kind for kind in outcome.errors)


def test_a_request_never_answered_times_out() -> None:
    async def handler(body: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    outcome = run(handler, jobs=2, clients=2, timeout=0.5)
    assert outcome.errors == {"TimeoutError": 2} and not outcome.latencies


@pytest.mark.parametrize("rate", [None, 100.0], ids=["closed", "open"])
def test_a_server_that_refuses_connections_fails_every_job(rate: float | None) -> None:
    """Closed or open loop, a refused connection is an error for each of its jobs."""
    outcome = asyncio.run(asyncio.wait_for(load("http://127.0.0.1:1", 7, 3, rate=rate), 10))
    assert sum(outcome.errors.values()) == 7 and not outcome.latencies
