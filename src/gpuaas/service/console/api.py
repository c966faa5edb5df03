"""The console's one way to the control plane: the API itself, called in-process.

Every page reads and writes through the same routes a CLI or SDK call reaches, with the
session's bearer token, so a page can show only what that token may see: roles, tenant
isolation, validation, rate limits and the audit log all apply unchanged, and there is no
query of the console's own to keep in step with them. The call goes through the ASGI app
(``httpx.ASGITransport``), not a socket: no port, no second process, the same event loop.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import Request

#: the host part of in-process URLs; never resolved, the transport hands the call to the app
_BASE = "http://console.internal"


class _QuietInProcess(logging.Filter):
    """httpx logs every request at INFO; the console's in-process calls are not traffic worth a
    line each (the audit log records the writes), other httpx clients' requests still are."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "console.internal" not in record.getMessage()


logging.getLogger("httpx").addFilter(_QuietInProcess())


@dataclass(frozen=True, slots=True)
class Answer:
    """One API answer: its status, its body (parsed JSON where it is JSON, else text) and
    headers. A 4xx body is a problem document (RFC 9457) whose ``errors`` name each field."""

    status: int
    body: Any
    headers: httpx.Headers
    content: bytes = b""  # the body as sent (a page may pass a large JSON on unchanged)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def detail(self) -> str:
        """The problem's sentence (or the status when the body has none)."""
        if isinstance(self.body, dict) and self.body.get("detail"):
            return str(self.body["detail"])
        return f"the API answered {self.status}"

    @property
    def field_errors(self) -> list[tuple[str, str]]:
        """``(field path, message)`` for each field the problem names (dotted, from the body)."""
        if not isinstance(self.body, dict):
            return []
        out = []
        for error in self.body.get("errors") or []:
            if isinstance(error, dict):
                out.append((str(error.get("field", "")), str(error.get("message", ""))))
        return out

    def items(self) -> list[dict[str, Any]]:
        """A page's items (``{"items": [...], "next": ...}``), or [] for anything else."""
        if isinstance(self.body, dict) and isinstance(self.body.get("items"), list):
            return self.body["items"]
        return []

    @property
    def next(self) -> str | None:
        return self.body.get("next") if isinstance(self.body, dict) else None


class Api:
    """The API as the session's token sees it; one per console request."""

    def __init__(self, request: Request, token: str | None) -> None:
        client = request.client
        self._transport = httpx.ASGITransport(
            app=request.app,
            # the caller's own address, so per-address limits see the person, not the console
            client=(client.host, client.port) if client else ("127.0.0.1", 0),
        )
        self._token = token

    def with_token(self, token: str) -> Api:
        self._token = token
        return self

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        content: str | bytes | None = None,
        content_type: str | None = None,
        token: str | None = None,
    ) -> Answer:
        headers = {"accept": "application/json"}
        bearer = token or self._token
        if bearer:
            headers["authorization"] = f"Bearer {bearer}"
        if content_type:
            headers["content-type"] = content_type
        clean = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        async with httpx.AsyncClient(transport=self._transport, base_url=_BASE) as client:
            answer = await client.request(
                method, path, params=clean, json=json_body, content=content, headers=headers
            )
        body: Any
        kind = answer.headers.get("content-type", "")
        if "json" in kind:
            try:
                body = answer.json()
            except json.JSONDecodeError:
                body = answer.text
        else:
            body = answer.text
        return Answer(answer.status_code, body, answer.headers, answer.content)

    async def get(self, path: str, **params: Any) -> Answer:
        return await self.call("GET", path, params=params)

    async def post(self, path: str, body: Any = None, **params: Any) -> Answer:
        return await self.call("POST", path, params=params, json_body=body)

    async def put(self, path: str, body: Any = None) -> Answer:
        return await self.call("PUT", path, json_body=body)

    async def delete(self, path: str) -> Answer:
        return await self.call("DELETE", path)
