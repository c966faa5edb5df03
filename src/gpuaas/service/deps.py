"""FastAPI dependencies: the request's database session and its authenticated principal."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from gpuaas.service.auth import Principal, hash_token, load_principal
from gpuaas.service.errors import ApiError
from gpuaas.service.principal_cache import PrincipalCache
from gpuaas.service.rate_limits import RateLimits
from gpuaas.store.db import Database
from gpuaas.store.tables import Token


def database(request: Request) -> Database:
    return request.app.state.db


def session(request: Request) -> Iterator[Session]:
    """One transaction per request: committed when the route returns, rolled back on error.

    Used with ``scope="function"``: the commit happens before the response is sent, so an
    acknowledged write is stored (FastAPI otherwise finishes ``yield`` dependencies after it).
    """
    db: Database = request.app.state.db
    with db.session() as s:
        yield s


SessionDep = Annotated[Session, Depends(session, scope="function")]


def bearer_token(request: Request) -> str:
    """The request's bearer token (401 when there is none)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "missing bearer token (Authorization: Bearer <token>)")
    return token.strip()


async def bearer_token_on_loop(request: Request) -> str:
    """:func:`bearer_token` as a dependency run on the event loop: FastAPI runs a plain ``def``
    dependency in its thread pool, a hand-off that cost the submission more CPU than reading the
    header (about 10 % of the server's CPU under ``bench api``)."""
    return bearer_token(request)


def authenticate(db: Connection | Session, token: str) -> Principal:
    """Who ``token`` stands for, read now; 401 when nobody. (Requests go through
    :func:`authenticate_request`, which answers from :mod:`gpuaas.service.principal_cache`.)"""
    found = load_principal(db, token, time.time())
    if found is None:
        raise ApiError(401, "invalid, expired or revoked token")
    return found


def authenticate_request(request: Request, db: Connection | Session, token: str) -> Principal:
    """:func:`authenticate` held to the rate limits (:mod:`gpuaas.service.rate_limits`): a
    client backed off after failed attempts is refused before its token is looked up, a failed
    attempt counts against it, and a good token's request counts against the token's and the
    path's tenant's rate."""
    limits: RateLimits | None = getattr(request.app.state, "rate_limits", None)
    if limits is None:
        request.state.principal = authenticate(db, token)
        return request.state.principal
    client = request.client.host if request.client else "unknown"
    now = time.time()
    limits.check_client(client, now)
    digest = hash_token(token)
    cache: PrincipalCache | None = getattr(request.app.state, "principals", None)
    found = cached_principal(request, digest, now)
    if found is None:
        found = _read_principal(request, db, token, digest, client, now, limits, cache)
    request.state.principal = found  # the audit log's "who"
    limits.token(digest)
    tenant = request.path_params.get("tenant")
    if tenant:
        limits.tenant(str(tenant))
    return found


#: the principal cache's answer to this request (a scope key): asked once per request
_CACHED = "gpuaas.cached_principal"


def cached_principal(request: Request, digest: str, now: float) -> Principal | None:
    """The principal cache's answer for this request's token hash, asked once per request and
    remembered in its scope: the cache picks one request per entry to read the token again
    (:meth:`PrincipalCache.get` answers it ``None``), and that request must read it however
    often it asks (the submission asks first to choose where to prepare the job)."""
    scope = request.scope
    if _CACHED in scope:
        remembered: Principal | None = scope[_CACHED]
        return remembered
    cache: PrincipalCache | None = getattr(request.app.state, "principals", None)
    found = cache.get(digest, now) if cache is not None else None
    scope[_CACHED] = found
    return found


def _read_principal(
    request: Request,
    db: Connection | Session,
    token: str,
    digest: str,
    client: str,
    now: float,
    limits: RateLimits,
    cache: PrincipalCache | None,
) -> Principal:
    """The token's principal read from the database (kept in ``cache`` when valid)."""
    generation = cache.generation if cache is not None else 0
    try:
        found = authenticate(db, token)
    except ApiError:
        if cache is not None:
            cache.drop(digest)
        # a guess is a token nobody was ever given; a revoked or expired one is a client
        # still configured with it, told 401 each time rather than backed off
        if db.execute(select(Token.id).where(Token.token_hash == digest)).first() is None:
            limits.failed(client, now)
        raise
    if cache is not None:
        cache.put(digest, found, generation)
    return found


def principal(request: Request, db: SessionDep) -> Principal:
    """The caller, read in the request's own session (one connection per request)."""
    return authenticate_request(request, db, bearer_token(request))


PrincipalDep = Annotated[Principal, Depends(principal)]
