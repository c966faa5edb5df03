"""Errors as RFC 9457 problem details (``application/problem+json``), naming the bad field.

Every error a request can cause ends here with a 4xx and a readable message; a 500 means a bug,
and even then the body is a problem document, not a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

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
    500: "Internal Server Error",
}


class ApiError(Exception):
    """Raise from a route: ``status``, a message, and the field at fault (dotted path)."""

    def __init__(self, status: int, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def forbidden(detail: str) -> ApiError:
    return ApiError(403, detail)


def conflict(detail: str, field: str | None = None) -> ApiError:
    return ApiError(409, detail, field)


def invalid(field: str, detail: str) -> ApiError:
    return ApiError(422, f"{field}: {detail}", field)


def problem(
    status: int,
    detail: str,
    errors: list[dict[str, str]] | None = None,
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
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        errors = [{"field": exc.field, "message": exc.detail}] if exc.field else None
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return problem(exc.status, exc.detail, errors, headers)

    @app.exception_handler(InvalidValue)
    async def _invalid(_: Request, exc: InvalidValue) -> JSONResponse:
        return problem(422, str(exc), [{"field": exc.field, "message": exc.problem}])

    @app.exception_handler(GpuaasError)
    async def _gpuaas(_: Request, exc: GpuaasError) -> JSONResponse:
        return problem(422, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": _location(tuple(e.get("loc", ()))), "message": str(e.get("msg", ""))}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
        return problem(422, detail, errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _bug(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return problem(500, "internal error; the server log has the details")
