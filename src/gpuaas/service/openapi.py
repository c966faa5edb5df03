"""The OpenAPI document, told the truth about errors and authentication.

FastAPI documents what a route returns when it succeeds and a 422 in its own JSON shape. The
server answers more than that, always as ``application/problem+json`` (RFC 9457, the body
:func:`gpuaas.service.errors.problem` writes), so every generated client and contract test
disagreed with it. :func:`document` adds, from the shape of each route rather than by hand per
route (new routes are covered as they are written):

- every ``/v1`` route: the bearer security scheme (an Authorize button in ``/docs``), 401
  (no, a bad, expired or revoked token), 403 (the token's role does not allow it) and 429
  (a rate limit or failed-authentication back-off, with ``Retry-After``);
- a route with path parameters: 404 (the named object does not exist or the caller may not
  see it); so does a write with a body, for an object the body names (a tenant, a queue): a
  well-formed reference to nothing is a 404, not a 422, as a path would answer (a route that
  answers 404 or 409 otherwise declares it in its decorator, e.g. an export the store cannot
  be said in is a 409);
- a route with a body: 413 (larger than the limit) and 422 (a field is wrong, or the body is not
  JSON/YAML at all; ``errors`` names each): a body is never a 400;
- a route with query parameters: 422;
- a write (POST, PUT, PATCH, DELETE): 409 (it conflicts with what is stored);
- routes that answer YAML or text say so (:data:`YAML` and :data:`TEXT` in their decorators).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

PROBLEM_MEDIA = "application/problem+json"

#: ``responses={200: YAML}`` for a route that answers YAML text
YAML: dict[str, Any] = {
    "description": "YAML documents",
    "content": {"application/yaml": {"schema": {"type": "string"}}},
}
#: ``responses={200: TEXT}`` for a route that answers plain text
TEXT: dict[str, Any] = {
    "description": "plain text",
    "content": {"text/plain": {"schema": {"type": "string"}}},
}

_PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "description": "An error (RFC 9457); ``errors`` names each field at fault.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {
                    "field": {"type": "string"},
                    "message": {"type": "string"},
                },
            },
        },
    },
}

_WHY = {
    "401": "no bearer token, or an invalid, expired or revoked one",
    "403": "the token's role does not allow this",
    "404": "the object (in the path, or named in the body or query) does not exist, or the "
    "caller may not see it",
    "409": "it conflicts with what is stored",
    "413": "the body is larger than the server's limit",
    "422": "a field is wrong; errors names each",
    "429": "a rate limit, or a back-off after failed authentication; see Retry-After",
}
_WRITES = {"post", "put", "patch", "delete"}


def _problem(status: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": _WHY[status],
        "content": {PROBLEM_MEDIA: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    if status == "429":
        out["headers"] = {
            "Retry-After": {
                "description": "seconds to wait before trying again",
                "schema": {"type": "integer", "minimum": 1},
            }
        }
    return out


def _statuses(path: str, method: str, op: dict[str, Any]) -> list[str]:
    params = op.get("parameters") or []
    statuses: list[str] = []
    if path.startswith("/v1/"):
        statuses += ["401", "403", "429"]
    if any(p.get("in") == "path" for p in params):
        statuses.append("404")
    if "requestBody" in op and method in _WRITES:
        statuses.append("404")
    if "requestBody" in op:
        statuses += ["413", "422"]
    if any(p.get("in") == "query" for p in params):
        statuses.append("422")
    if method in _WRITES and path.startswith("/v1/"):
        statuses.append("409")
    return sorted(set(statuses))


def document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document with its errors and security declared (built once)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas["Problem"] = _PROBLEM_SCHEMA
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    components["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "an API token (gpa_...): `gpuaas login`, or minted with POST /v1/tokens",
        }
    }
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            if path.startswith("/v1/"):
                op["security"] = [{"bearer": []}]
            responses = op.setdefault("responses", {})
            given = {s for s in responses if s in _WHY}  # FastAPI's own 422 for a path int
            for status in given | set(_statuses(path, method, op)):
                responses[status] = _problem(status)
    app.openapi_schema = doc
    return doc


def install(app: FastAPI) -> None:
    app.openapi = lambda: document(app)  # type: ignore[method-assign]
