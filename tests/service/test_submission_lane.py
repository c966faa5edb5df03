"""The submission lane (service/submission_lane.py) answers ``POST /v1/tenants/{t}/jobs`` as
the FastAPI route does, byte for byte: every answer, good or bad, and its audit entry.

The route still serves what the lane passes on (a ``Content-Type`` other than exactly
``application/json``), so each request is sent twice, once through the lane and once with
``application/json; charset=utf-8`` through FastAPI, which reads it the same way, and the two
answers are compared: status, media type and body. Created jobs are compared through their
idempotency key: the job one side created is what the other side answers for the same key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from job_world import build_world
from job_world import job_spec as world_job
from sqlalchemy import select
from starlette.routing import Match
from test_bad_input import CASES, JOBS, USER, World, broken, job_spec, json_values

from gpuaas.service.app import create_app
from gpuaas.service.jobs import inserted_job, job_view, prepare_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.settings import Settings
from gpuaas.service.submission_lane import PATH, SubmissionLane
from gpuaas.store.db import Database
from gpuaas.store.tables import AuditRow, Job, Tenant

ADMIN_TOKEN = "gpa_test-admin-token-0123456789"
LANE = {"content-type": "application/json"}
ROUTE = {"content-type": "application/json; charset=utf-8"}  # FastAPI reads it alike


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("lane")
    settings = Settings(
        db_url=f"sqlite:///{tmp / 'gpuaas.db'}", data_dir=tmp, reconcile=False,
        admin_token=ADMIN_TOKEN,
    )  # fmt: skip
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        w = World(client, "sqlite")
        w.build()
        yield w


def both(world: World, content: bytes, token: str | None, **headers: str) -> list[httpx.Response]:
    """The same request through the lane and through the route."""
    return [
        world.call("POST", JOBS, token=token, content=content, headers={**kind, **headers})
        for kind in (LANE, ROUTE)
    ]


def same(lane: httpx.Response, route: httpx.Response) -> None:
    assert lane.status_code == route.status_code, (lane.text, route.text)
    assert lane.headers["content-type"] == route.headers["content-type"]
    assert lane.content == route.content


def audited(world: World) -> list[dict[str, Any]]:
    """Every audit entry, oldest first."""
    items: list[dict[str, Any]] = []
    url = "/v1/audit?limit=1000"
    while url:
        answer = world.call("GET", url)
        assert answer.status_code == 200, answer.text
        items += answer.json()["items"]
        after = answer.json()["next"]
        url = f"/v1/audit?limit=1000&after={after}" if after else ""
    return items


JOB_CASES = [c for c in CASES if c.method == "POST" and c.url == JOBS]


@pytest.mark.parametrize("case", JOB_CASES, ids=[c.id for c in JOB_CASES])
def test_every_refusal_is_the_routes_own(world: World, case: Any) -> None:
    token = world.tokens[case.token] if case.token != "admin" else ADMIN_TOKEN
    content = case.content if case.content is not None else json.dumps(case.json).encode()
    extra = {k: v for k, v in (case.headers or {}).items() if k != "content-type"}
    if case.headers and case.headers.get("content-type") not in (None, "application/json"):
        return  # another media type: the lane passes it on, the route answers it alone
    lane, route = both(world, content, token, **extra)
    assert lane.status_code == case.status
    same(lane, route)


def test_authentication_and_roles_answer_alike(world: World) -> None:
    body = json.dumps(job_spec("who", "acme-lq")).encode()
    for token in (None, "", "gpa_nobody-at-all", world.tokens["globex/tenant-user"]):
        lane, route = both(world, body, token)
        assert lane.status_code in (401, 404), lane.text
        same(lane, route)
    # an unreadable body is 422 before a missing token is 401, as FastAPI orders them
    lane, route = both(world, b'{"name": ', None)
    assert lane.status_code == 422
    same(lane, route)
    # a valid body without a token is 401; a bad one without a token is the body's 422
    lane, route = both(world, json.dumps({"name": "x"}).encode(), None)
    assert lane.status_code == 401
    same(lane, route)


def test_a_created_job_is_answered_byte_for_byte_as_the_route_answers_it(world: World) -> None:
    token = world.tokens[USER]
    for first, then in ((LANE, ROUTE), (ROUTE, LANE)):
        key = f"key-{first['content-type'][-5:]}"
        body = json.dumps({**job_spec("twice", "acme-lq"), "idempotencyKey": key}).encode()
        made = world.call("POST", JOBS, token=token, content=body, headers=first)
        again = world.call("POST", JOBS, token=token, content=body, headers=then)
        assert (made.status_code, again.status_code) == (201, 200)
        assert made.content == again.content  # the same job, the same bytes
        assert made.headers["content-type"] == again.headers["content-type"] == "application/json"
        assert made.headers["content-length"] == again.headers["content-length"]


def test_each_request_leaves_the_same_audit_entry(world: World) -> None:
    token = world.tokens[USER]
    bodies = [
        json.dumps({**job_spec("audited", "acme-lq"), "idempotencyKey": "audited"}).encode(),
        b'{"name": "x",',
        json.dumps(job_spec("BAD", "acme-lq")).encode(),
    ]
    for body in bodies:
        both(world, body, token)
    entries = [e for e in audited(world) if e["route"] == PATH][-2 * len(bodies) :]
    fields = ("user", "token_id", "tenant", "method", "route", "object", "status", "outcome",
              "request_digest", "after_digest")  # fmt: skip
    created, replayed = entries[0], entries[1]  # the lane made it, the route answered it again
    assert created["status"] == 201 and created["object"].startswith(f"{JOBS}/")
    assert replayed["status"] == 200 and replayed["object"] == JOBS
    assert created["after_digest"] == replayed["after_digest"]  # the same answer, byte for byte
    assert created["user"] == "acme-tenant-user" and created["token_id"]
    for lane, route in zip(entries[2::2], entries[3::2], strict=True):  # refusals
        assert lane["status"] == 422
        assert {k: lane[k] for k in fields} == {k: route[k] for k in fields}


def test_a_created_jobs_entry_is_stored_with_it_once(world: World) -> None:
    """Either way in (lane or route), a created job's entry is the group-commit writer's,
    stored in the job's transaction: exactly one entry for it (the middleware and the lane add
    none), with its answer's digest; the job's next change (a cancel, queued) comes after it."""
    token = world.tokens[USER]
    for way, kind in (("lane", LANE), ("route", ROUTE)):
        body = json.dumps(job_spec(f"chained-{way}", "acme-lq")).encode()
        made = world.call("POST", JOBS, token=token, content=body, headers=kind)
        assert made.status_code == 201, made.text
        job = f"{JOBS}/{made.json()['id']}"
        with world.client.app.state.db.sessions() as s:  # type: ignore[attr-defined]
            stored = list(s.scalars(select(AuditRow).where(AuditRow.object == job)))
        assert len(stored) == 1  # in the table as the job is answered: the job's transaction
        assert stored[0].after_digest == hashlib.sha256(made.content).hexdigest()
        cancelled = world.call("POST", f"{job}/cancel", token=token)
        assert cancelled.status_code == 200, cancelled.text
        entries = audited(world)
        (create,) = [e for e in entries if e["object"] == job]
        assert create["status"] == 201 and create["before_digest"] is None
        assert create["request_digest"] == hashlib.sha256(body).hexdigest()
        assert create["user"] == "acme-tenant-user" and create["token_id"]
        (cancel,) = [e for e in entries if e["object"] == f"{job}/cancel"]  # queued, after it
        assert entries.index(cancel) > entries.index(create)
        assert cancel["after_digest"] == hashlib.sha256(cancelled.content).hexdigest()


def test_a_body_over_the_limit_is_413_declared_or_sent(world: World) -> None:
    token = world.tokens[USER]
    big = b"[" + b"0," * (1 << 20) + b"0]"
    lane, route = both(world, big, token)
    assert lane.status_code == 413
    same(lane, route)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds as it is read
        yield from (big[i : i + 65536] for i in range(0, len(big), 65536))

    sent = [
        world.call("POST", JOBS, token=token, content=chunks(), headers=kind)
        for kind in (LANE, ROUTE)
    ]
    assert sent[0].status_code == 413, sent[0].text
    same(*sent)  # the route's answer too (FastAPI's 400 for a failed read, caused by the limit)
    other = world.call(
        "POST", "/v1/tenants/acme/local-queues", content=chunks(), headers=LANE
    )  # any route: BodyLimit's refusal, through FastAPI's read
    assert other.status_code == 413 and other.content == sent[0].content


def test_the_router_would_choose_the_submission_route_for_what_the_lane_takes(
    world: World,
) -> None:
    """The lane takes a request by the route's own ``matches``; no route before it in the
    router's order may match the same requests (it would be the one serving them)."""
    app = world.client.app
    for tenant in ("acme", "x", "jobs", "a%2Fb", "batch"):
        scope = {"type": "http", "method": "POST", "path": f"/v1/tenants/{tenant}/jobs",
                 "root_path": "", "headers": []}  # fmt: skip
        first = None
        for context in iter_route_contexts(app.router.routes):  # type: ignore[attr-defined]
            route = getattr(context, "starlette_route", None) or context.original_route
            if route.matches(scope)[0] is Match.FULL:
                first = route
                break
        assert first is not None and getattr(first, "path", None) == PATH
        assert "POST" in first.methods  # type: ignore[attr-defined]
    lanes = [m for m in app.user_middleware if m.cls is SubmissionLane]  # type: ignore[attr-defined]
    assert len(lanes) == 1


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    payload=(broken(job_spec("gen", "acme-lq")) | json_values).map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=64)
)
def test_generated_bodies_are_answered_alike(world: World, payload: bytes) -> None:
    lane, route = both(world, payload, world.tokens[USER])
    if lane.status_code >= 400 or route.status_code >= 400:
        same(lane, route)
    else:  # each created its own job (no key) or answered the one the key made
        assert lane.status_code in (200, 201) and route.status_code in (200, 201)


def test_the_lane_serves_the_submissions_of_a_real_app(tmp_path: Path) -> None:
    """Not only in a test's world: the app ``gpuaas serve`` runs has the lane first."""
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'g.db'}", data_dir=tmp_path,
                        reconcile=False, admin_token=ADMIN_TOKEN)  # fmt: skip
    app = create_app(settings)
    assert app.user_middleware[0].cls is SubmissionLane


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"idempotencyKey": "k", "priorityClass": "high", "maxRunTime": 60},
        {"kind": "inference", "autoscale": {"minReplicas": 1, "maxReplicas": 3}},
        {"env": {"A": "1"}, "duration": 5, "utilization": {"gpu": 50}},
    ],
)
def test_an_inserted_jobs_view_is_the_orm_jobs(sqlite_url: str, extra: dict[str, Any]) -> None:
    """The submission answers a job it created from the row it inserted
    (``jobs.inserted_job``), not from an ORM ``Job``: the same view, byte for byte."""
    db = Database(sqlite_url)
    try:
        world = build_world(db)
        with db.sessions() as s:
            tenant = s.get(Tenant, world["tenant"])
            assert tenant is not None
            spec = JobSpec.model_validate(world_job("view", **extra))
            values = prepare_job(s, tenant, world["alice"], spec, 1_700_000_000.5)
        orm = job_view(Job(id=42, **values), "acme", "alice").model_dump_json()
        plain = job_view(inserted_job(42, values), "acme", "alice")  # type: ignore[arg-type]
        assert plain.model_dump_json() == orm
    finally:
        db.dispose()
