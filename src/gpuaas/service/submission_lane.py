"""The submission lane: ``POST /v1/tenants/{tenant}/jobs`` answered as plain ASGI.

The submission is the API's hot path (``gpuaas bench api``), and once its own work was cut
(principal cache, group commit) most of the server's CPU per submission was FastAPI's and
Starlette's request handling around it: routing over some 200 routes, dependency solving, the
body read through three ``receive`` wrappers, the answer through four ``send`` wrappers (audit,
body limit, exceptions, server errors), and the response object. This middleware, the
outermost of the app's own, takes exactly that route's requests and does what those layers did
for it, once and inline; every other request passes through untouched.

What it keeps, each as the layers it stands in for did it:

- **which requests**: ``POST`` whose path the submission route itself matches (the route's own
  ``matches``; a test checks that the router picks no other route first) and whose
  ``Content-Type`` is exactly ``application/json``. Anything else (another media type, JSON
  with parameters, no type) goes the ordinary way, whose answers for it stay FastAPI's.
- **the body limit** (:class:`gpuaas.service.limits.BodyLimit`): a declared
  ``Content-Length`` over the limit is 413 before anything is read, and so is a body that
  grows past it.
- **the body, as FastAPI reads it**: a valid document is validated straight from the bytes
  (``JobSpec.model_validate_json``, no ``json.loads`` and no second walk). Anything that fails
  there, and any body over 4,300 bytes (where Python's JSON reader refuses an integer that
  pydantic's would take), is read again exactly as FastAPI does (``json.loads``; its
  ``json_invalid`` error at a character offset or its 400; the route's own body field
  validated with the ``body`` location), so every refusal is the same problem document.
- **the order of the answers**: an unreadable body (422), then a missing token (401), then the
  body's fields (422), then the route: authentication, rate limits, the tenant's roles,
  idempotency and the job's checks (:func:`gpuaas.service.routers.jobs.submission`, the very
  function the route calls).
- **errors**: an exception is answered by the app's own exception handler for it (problem+json
  naming the field); one without a handler of its own goes on to Starlette's server-error
  layer, which answers 500 as before.
- **the audit entry** (:class:`gpuaas.service.audit.AuditMiddleware`): the digests of the body
  (the audit's :class:`~gpuaas.service.audit.BodyDigest`) and of the answer, the caller, the
  route, the object made, for every outcome; a created job's is stored by the group-commit
  writer in the job's own transaction (as on the route's ordinary way), every other here.
- **the answer**: the view serialized once, ``Content-Length`` and ``Content-Type:
  application/json`` in Starlette's order: byte for byte the route's answer.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fastapi.dependencies.utils import request_body_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from gpuaas.service.audit import BODY_DIGEST, WRITTEN, AuditLog, BodyDigest
from gpuaas.service.deps import bearer_token
from gpuaas.service.errors import BodyTooLarge, problem
from gpuaas.service.limits import declared_over
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.routers.jobs import submission

PATH = "/v1/tenants/{tenant}/jobs"
#: the longest body validated straight from its bytes: Python's ``json`` refuses an integer of
#: more than 4,300 digits (FastAPI then answers 400, which the API answers as 422), pydantic's
#: reader would take it; a longer body is read the ordinary way
_DIRECT_MAX = 4300
_JSON = b"application/json"


class SubmissionLane:
    """The middleware (see the module docstring). ``audit`` and ``max_bytes`` are the app's
    audit log and body limit."""

    def __init__(self, app: ASGIApp, audit: AuditLog, max_bytes: int) -> None:
        self.app = app
        self.audit = audit
        self.max_bytes = max_bytes
        self._route: APIRoute | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"][-5:] != "/jobs":
            await self.app(scope, receive, send)
            return
        route = self._route or self._find_route(scope)
        match, child = route.matches(scope)
        if match is not Match.FULL or not _json_body(scope):
            await self.app(scope, receive, send)
            return
        scope.update(child)  # path_params and route, as the router sets them (the audit reads)
        await self._answer(scope, receive, send, route)

    def _find_route(self, scope: Scope) -> APIRoute:
        for context in iter_route_contexts(scope["app"].router.routes):
            route = context.original_route
            if isinstance(route, APIRoute) and route.path == PATH and "POST" in route.methods:
                self._route = route
                return route
        raise RuntimeError(f"no route POST {PATH}")  # a bug in the app's assembly

    async def _answer(self, scope: Scope, receive: Receive, send: Send, route: APIRoute) -> None:
        request_hash = scope[BODY_DIGEST] = BodyDigest()
        status = 500  # what the entry says when an exception leaves (the server-error layer's)
        answer = b""
        made: int | None = None
        try:
            request = Request(scope, receive)
            try:
                body = await self._body(scope, receive, request_hash)
                result = None if body is None else await _submitted(request, route, body)
            except Exception as exc:
                response = await _handled(request, exc)
            else:
                if result is None:  # over the body limit
                    response = problem(413, str(BodyTooLarge(self.max_bytes)))
                else:
                    answer, created, made = result
                    status = 201 if created else 200
                    await send(
                        {
                            "type": "http.response.start",
                            "status": status,
                            "headers": [
                                (b"content-length", str(len(answer)).encode("latin-1")),
                                (b"content-type", _JSON),
                            ],
                        }
                    )
                    await send({"type": "http.response.body", "body": answer})
                    return
            status = response.status_code
            answer = bytes(response.body)
            await response(scope, receive, send)
        finally:
            if not scope.pop(WRITTEN, False):  # a created job's entry is stored with it
                self.audit.record_answer(
                    scope,
                    status,
                    request_hash.hexdigest(),
                    hashlib.sha256(answer).hexdigest(),
                    [answer] if answer else [],
                    made if status == 201 else None,
                )

    async def _body(self, scope: Scope, receive: Receive, digest: BodyDigest) -> bytes | None:
        """The whole body, digested as read; None when it is larger than the limit, declared
        or sent."""
        if declared_over(scope, self.max_bytes):
            return None
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                digest.update(chunk)
                seen += len(chunk)
                if seen > self.max_bytes:
                    return None
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            elif message["type"] == "http.disconnect":  # FastAPI: its 400 for any failed read
                raise HTTPException(status_code=400, detail="There was an error parsing the body")
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _json_body(scope: Scope) -> bool:
    """Whether the request says its body is ``application/json``, exactly."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value == _JSON
    return False


async def _submitted(request: Request, route: APIRoute, body: bytes) -> tuple[bytes, bool, int]:
    """The body read and validated, the token taken, and the job submitted, in FastAPI's
    order (see the module docstring)."""
    spec: JobSpec | None = None
    if body and len(body) <= _DIRECT_MAX:
        try:
            spec = JobSpec.model_validate_json(body)
        except ValidationError:
            spec = None  # read again the ordinary way: its errors are FastAPI's
    if spec is None:
        received = _parsed(body)
        token = bearer_token(request)
        assert route.body_field is not None
        values, errors = await request_body_to_args([route.body_field], received, False)
        if errors:
            raise RequestValidationError(errors, body=received)
        spec = values[route.body_field.name]
    else:
        token = bearer_token(request)
    tenant = str(request.path_params["tenant"])
    return await submission(request, tenant, spec, token)


def _parsed(body: bytes) -> Any:
    """The body as FastAPI reads a JSON body (``get_request_handler``): nothing when empty, a
    ``json_invalid`` error at the character offset, 400 when it cannot be read otherwise."""
    if not body:
        from fastapi._compat import Undefined

        return Undefined
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise RequestValidationError(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", exc.pos),
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": exc.msg},
                }
            ],
            body=exc.doc,
        ) from exc
    except Exception as exc:
        raise HTTPException(status_code=400, detail="There was an error parsing the body") from exc


async def _handled(request: Request, exc: Exception) -> Any:
    """The app's own answer to ``exc`` (its exception handler, found by the exception's
    class as Starlette finds it); re-raised when only the catch-all would answer it, so that
    Starlette's server-error layer answers and logs it as it does for every route."""
    handlers = request.app.exception_handlers
    for cls in type(exc).__mro__:
        if cls is Exception:
            break
        handler = handlers.get(cls)
        if handler is not None:
            return await handler(request, exc)
    raise exc
