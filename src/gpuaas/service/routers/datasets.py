"""The dataset routes beyond the five verbs of the one resource table: preload.

The five verbs (``/v1/tenants/{tenant}/datasets``) come from the table
(:mod:`gpuaas.model.api_kinds`); a preload is a write on the dataset, so it needs the tenant
admin role like the writes of the table's routes.
"""

from __future__ import annotations

from fastapi import APIRouter

from gpuaas.service.auth import Need, tenant_for
from gpuaas.service.datasets import preload
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.governance_kinds import At
from gpuaas.service.models.datasets import DatasetOut, PreloadIn

router = APIRouter(prefix="/v1", tags=["datasets"])


@router.post(
    "/tenants/{tenant}/datasets/{name}/preload", response_model=DatasetOut, status_code=202
)
def preload_dataset(
    tenant: str, name: str, body: PreloadIn, session: SessionDep, p: PrincipalDep
) -> DatasetOut:
    """Warm the dataset on ``nodes``: their caches show ``loading`` until the reconciler has
    copied or checked the files there (local, Slurm) or the backend reports it (simulator), then
    ``warm``, or ``failed`` with the reason (docs/datasets.md)."""
    at = At(session, p, tenant_for(session, p, tenant, Need.ADMIN))
    return preload(at, name, body)
