"""Tenant-admin pages: clusters, queues and quotas, users and limits, usage against budgets,
alerts (all under ``/t/{tenant}/``)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(include_in_schema=False)
