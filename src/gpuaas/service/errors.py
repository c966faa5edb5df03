"""Errors as RFC 9457 problem details (``application/problem+json``), naming the bad field.

Every error a request can cause ends here with a 4xx and a readable message; a 500 means a bug,
and even then the body is a problem document, not a traceback.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from sqlalchemy.exc import OperationalError, StatementError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from gpuaas.model.errors import GpuaasError, InvalidValue

log = logging.getLogger("gpuaas.service")

PROBLEM = "application/problem+json"
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


class ApiError(Exception):
    """Raise from a route: ``status``, a message, and the field at fault (dotted path)."""

    def __init__(self, status: int, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field


class BodyTooLarge(Exception):
    """A request body grew past the limit of ``max_bytes`` as it was read (service/limits.py)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"request body is larger than the limit of {max_bytes} bytes")


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def missing(field: str, detail: str) -> ApiError:
    """A body field names an object that does not exist (or the caller may not see): a 404
    naming the field, as a path's missing object is; the request itself was well formed."""
    return ApiError(404, f"{field}: {detail}", field)


def forbidden(detail: str) -> ApiError:
    return ApiError(403, detail)


def conflict(detail: str, field: str | None = None) -> ApiError:
    return ApiError(409, detail, field)


def invalid(field: str, detail: str) -> ApiError:
    return ApiError(422, f"{field}: {detail}", field)


class ProblemResponse(JSONResponse):
    """ASCII-escaped JSON: a detail that quotes a bad input (an unpaired UTF-16 surrogate) must
    still encode."""

    media_type = PROBLEM

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def problem(
    status: int,
    detail: str,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if errors:
        body["errors"] = errors
    return ProblemResponse(body, status_code=status, headers=headers)


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


_UNPAIRED = "a string holds an unpaired UTF-16 surrogate (not valid Unicode text)"
_DEEP = "the document is nested too deeply"
_NUL = "a string holds a NUL (0x00) character"
_UNPARSED = "the body could not be parsed (an integer of 4,300 digits or more, or the like)"


def _field_error(error: Any) -> dict[str, str]:
    """A pydantic error as ``{field, message}``; malformed JSON is the body's fault, at a
    character offset (the location pydantic gives is that offset)."""
    loc = tuple(error.get("loc", ()))
    message = str(error.get("msg", ""))
    if error.get("type") == "json_invalid":
        at = loc[-1] if loc and isinstance(loc[-1], int) else None
        where = f" at character {at}" if at is not None else ""
        return {"field": "body", "message": f"{message}{where}"}
    return {"field": _location(loc), "message": message}


def allowed_methods(request: Request) -> str:
    """Every method some route takes at this path, for a 405's ``Allow``.

    Starlette answers 405 with the methods of the first route whose path matched, but a path
    with a GET route and a POST route is two routes: its ``Allow`` named only one of them.
    """
    methods: set[str] = set()
    for context in iter_route_contexts(request.app.router.routes):
        route = getattr(context, "starlette_route", None) or context.original_route
        if route.matches(request.scope)[0] is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        errors = [{"field": exc.field, "message": exc.detail}] if exc.field else None
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            headers = {"Retry-After": str(retry_after)}
        return problem(exc.status, exc.detail, errors, headers)

    @app.exception_handler(InvalidValue)
    async def _invalid(_: Request, exc: InvalidValue) -> JSONResponse:
        return problem(422, str(exc), [{"field": exc.field, "message": exc.problem}])

    @app.exception_handler(GpuaasError)
    async def _gpuaas(_: Request, exc: GpuaasError) -> JSONResponse:
        return problem(422, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [_field_error(e) for e in exc.errors()]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
        return problem(422, detail, errors)

    @app.exception_handler(UnicodeError)
    async def _unicode(_: Request, exc: UnicodeError) -> JSONResponse:
        return problem(422, f"body: {_UNPAIRED}", [{"field": "body", "message": _UNPAIRED}])

    @app.exception_handler(RecursionError)
    async def _deep(_: Request, exc: RecursionError) -> JSONResponse:
        return problem(422, f"body: {_DEEP}", [{"field": "body", "message": _DEEP}])

    @app.exception_handler(StatementError)
    async def _statement(request: Request, exc: StatementError) -> JSONResponse:
        """A value the database driver refuses (a NUL byte, an unpaired surrogate) is the
        request's fault; an unreachable database is a 503; anything else a bug."""
        orig = exc.orig
        if isinstance(orig, UnicodeError):
            return problem(422, f"body: {_UNPAIRED}", [{"field": "body", "message": _UNPAIRED}])
        if isinstance(orig, ValueError) and "NUL" in str(orig):
            return problem(422, f"body: {_NUL}", [{"field": "body", "message": _NUL}])
        if isinstance(exc, OperationalError):
            log.error("database error: %s", orig)
            return problem(503, "the database is unavailable; try again")
        return await _bug(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = getattr(exc, "headers", None)
        if exc.status_code == 400 and isinstance(exc.__cause__, BodyTooLarge):  # chunked, too long
            return problem(413, str(exc.__cause__))
        if exc.status_code == 400:  # FastAPI's "error parsing the body" (a 4,301-digit integer)
            return problem(422, f"body: {_UNPARSED}", [{"field": "body", "message": _UNPARSED}])
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": allowed_methods(request)}
        return problem(exc.status_code, str(exc.detail), headers=headers)

    @app.exception_handler(Exception)
    async def _bug(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return problem(500, "internal error; the server log has the details")
