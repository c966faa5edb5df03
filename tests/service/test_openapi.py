"""The OpenAPI document declares the errors the server gives, as problem+json, and the bearer
scheme; every route's actual answer to an unauthenticated, a forbidden and a malformed request
is one it documents."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conftest import Api

PROBLEM = "application/problem+json"
WRITES = {"post", "put", "patch", "delete"}


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if path.startswith("/v1/")
    ]


def _filled(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "nothing-here", path)


def test_every_route_declares_its_errors_as_problems(sqlite_api: Api) -> None:
    doc = sqlite_api.get("/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"],
    }
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    operations = _operations(doc)
    assert len(operations) > 100
    for path, method, op in operations:
        where = f"{method.upper()} {path}"
        assert op["security"] == [{"bearer": []}], where
        responses = op["responses"]
        for status in ("401", "403", "429"):
            assert PROBLEM in responses[status]["content"], where
        assert "Retry-After" in responses["429"]["headers"], where
        if "requestBody" in op:
            assert {"413", "422"} <= set(responses), where
            assert "400" not in responses, where  # a body that is not JSON is a 422 too
        if any(p["in"] == "path" for p in op.get("parameters", [])):
            assert "404" in responses, where
        if method in WRITES:
            assert "409" in responses, where
        for status, answer in responses.items():
            if status >= "400":
                assert list(answer["content"]) == [PROBLEM], (where, status)


def test_the_answers_are_the_documented_ones(sqlite_api: Api) -> None:
    """No token, a token of a user with no role, and a body that is not JSON: each route's
    answer is a status it documents, in problem+json."""
    doc = sqlite_api.get("/openapi.json").json()
    made = sqlite_api.post("/v1/tenants", json={"name": "acme", "displayName": "Acme"})
    assert made.status_code == 201, made.text
    member = sqlite_api.put("/v1/tenants/acme/members/nobody", json={"role": "tenant-user"})
    assert member.status_code == 200, member.text
    minted = sqlite_api.post("/v1/users/nobody/tokens", json={"name": "t"})
    assert minted.status_code == 201, minted.text
    nobody = sqlite_api.as_(minted.json()["token"])
    for path, method, op in _operations(doc):
        url = _filled(path)
        declared = set(op["responses"])
        for caller, kwargs in (
            (sqlite_api.as_(None), {}),
            (nobody, {}),
            (nobody, {"content": b"{not json", "headers": {"content-type": "application/json"}}),
        ):
            if kwargs and "requestBody" not in op:
                continue
            answer = caller.request(method.upper(), url, **kwargs)
            assert str(answer.status_code) in declared, (method, path, answer.status_code)
            if answer.status_code >= 400:
                assert answer.headers["content-type"].startswith(PROBLEM), (method, path)


@pytest.mark.parametrize("route", ["/v1/kueue/export", "/v1/kai/export", "/v1/volcano/export"])
def test_yaml_routes_say_yaml(sqlite_api: Api, route: str) -> None:
    doc = sqlite_api.get("/openapi.json").json()
    assert list(doc["paths"][route]["get"]["responses"]["200"]["content"]) == ["application/yaml"]
    answer = sqlite_api.get(route)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/yaml")


def test_the_member_roles_the_document_lists_are_the_servers() -> None:
    from gpuaas.service.auth import TENANT_ROLES
    from gpuaas.service.models.identity import MemberIn

    enum = MemberIn.model_json_schema()["properties"]["role"]["enum"]
    assert enum == [str(r) for r in TENANT_ROLES]
