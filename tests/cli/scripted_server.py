"""A scripted HTTP/1.1 server for ``bench api``'s load generator, shared by the closed-loop
(``test_bench_api_load.py``) and open-loop (``test_bench_api_openloop.py``) tests.

It reads each request framed by its ``content-length`` and lets the test's handler answer, or
stall, split, refuse or drop the connection, so the generator's bookkeeping is checked against
answers the real server would rarely give."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rich.progress import Progress

from gpuaas.cli.bench_api import Outcome, submit_all

#: a handler gets the request's head and body and the connection's writer, and answers (or not)
Handler = Callable[[bytes, bytes, asyncio.StreamWriter], Awaitable[None]]


def content_length(head: bytes) -> int:
    return int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])


async def load_against(
    handler: Handler,
    *,
    jobs: int,
    connections: int,
    timeout: float = 60.0,
    rate: float | None = None,
) -> Outcome:
    """Run the generator (closed loop, or open at ``rate``) against a server on a free port
    whose every request ``handler`` answers; the server stops with the run."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                await handler(head, await reader.readexactly(content_length(head)), writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await load(f"http://127.0.0.1:{port}", jobs, connections, timeout, rate)
    finally:
        server.close()


async def load(
    url: str, jobs: int, connections: int, timeout: float = 60.0, rate: float | None = None
) -> Outcome:
    """The generator against ``url`` (a test's server, or a port nothing listens on)."""
    with Progress(disable=True) as progress:
        return await submit_all(
            url, "tok", None, connections, jobs, 30.0, progress, timeout=timeout, rate=rate
        )
