"""Liveness: no authentication, no database write."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy import text

from gpuaas import __version__

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(request: Request) -> dict[str, Any]:
    """``ok`` when the database answers; says whether this process runs the reconciler."""
    with request.app.state.db.engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    reconciler = request.app.state.reconciler
    return {
        "status": "ok",
        "version": __version__,
        "leader": bool(reconciler is not None and reconciler.is_leader),
    }
