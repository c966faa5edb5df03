"""Request body limit: a body larger than the limit gets 413 before any of it is parsed.

A body with no ``Content-Length`` (chunked) is held to the limit as it is read: the read fails
with :class:`~gpuaas.service.errors.BodyTooLarge`. A route reading it through FastAPI sees that
as FastAPI's "error parsing the body" (a 400 caused by it), which the API's error handler
answers 413 too (``errors.install``)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuaas.service.errors import BodyTooLarge, problem


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(413, str(BodyTooLarge(self.max_bytes)))
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = self._too_large  # built only when needed: most requests are small
        if declared_over(scope, self.max_bytes):
            await too_large(scope, receive, send)
            return
        seen = 0
        started = False

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited, tracking_send)
        except BodyTooLarge:
            if not started:
                await too_large(scope, receive, send)


def declared_over(scope: Scope, max_bytes: int) -> bool:
    """Whether the request's ``Content-Length`` says more than ``max_bytes`` (an unreadable one
    says nothing: the body is then held to the limit as it is read)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value) > max_bytes
            except ValueError:
                return False
    return False
