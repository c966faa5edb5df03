"""FastAPI dependencies: the request's database session and its authenticated principal."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from gpuaas.service.auth import Principal, load_principal
from gpuaas.service.errors import ApiError
from gpuaas.store.db import Database


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


def authenticate(db: Connection | Session, token: str) -> Principal:
    """Who ``token`` stands for, read now (no cache: nothing stale); 401 when nobody."""
    found = load_principal(db, token, time.time())
    if found is None:
        raise ApiError(401, "invalid, expired or revoked token")
    return found


def principal(request: Request, db: SessionDep) -> Principal:
    """The caller, read in the request's own session (one connection per request)."""
    return authenticate(db, bearer_token(request))


PrincipalDep = Annotated[Principal, Depends(principal)]
