"""The provider's RDMA / SR-IOV network objects for a NIC pool (platform roles).

``GET /v1/network/manifests?pool=P&tenant=T...`` renders, from the registered fleet, what makes
pool ``P`` (left out: every NIC pool of the fleet, in name order) usable from the pods of tenants
``T`` (left out: every tenant): the SR-IOV operator's
``SriovNetworkNodePolicy`` and a ``SriovNetwork`` / ``SriovIBNetwork`` per tenant namespace, or
for a shared RDMA device pool a NetworkAttachmentDefinition per namespace
(:mod:`gpuaas.backends.kubernetes.network`). They are cluster-wide objects in the operator's
namespace that select nodes, so only the platform (provider) may read them; a tenant's pods
join the attachment through their job's ``podSets[].network``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Query, Request, Response
from sqlalchemy import select

from gpuaas.backends.kubernetes.manifests import namespace_of
from gpuaas.backends.kubernetes.network import OPERATOR_NAMESPACE, network_objects
from gpuaas.model.errors import InvalidValue
from gpuaas.service import fleet
from gpuaas.service.auth import require_platform
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.errors import invalid
from gpuaas.store.tables import Tenant
from gpuaas.supply.nics import pools_of

router = APIRouter(prefix="/v1/network", tags=["network"])


@router.get(
    "/manifests",
    response_model=list[dict[str, Any]],
    responses={200: {"content": {"application/yaml": {}}}},
)
def network_manifests(
    request: Request,
    session: SessionDep,
    p: PrincipalDep,
    pool: Annotated[
        str | None, Query(description="the NIC pool, e.g. nvidia.com/rdma_ib (default: every)")
    ] = None,
    tenant: Annotated[
        list[str] | None, Query(description="tenants whose pods use it (repeat; default: every)")
    ] = None,
    operator_namespace: Annotated[
        str, Query(alias="operatorNamespace", description="the SR-IOV operator's namespace")
    ] = OPERATOR_NAMESPACE,
    ipam: Annotated[str | None, Query(description="a CNI IPAM object as JSON")] = None,
    format: Annotated[str, Query(pattern="^(json|yaml)$")] = "json",
) -> Any:
    """The SR-IOV objects of ``pool`` for ``tenant``'s namespaces, as a JSON list or, with
    ``format=yaml``, a YAML stream."""
    require_platform(p, write=False)
    tenants = list(tenant or session.scalars(select(Tenant.name).order_by(Tenant.name)))
    known = set(session.scalars(select(Tenant.name).where(Tenant.name.in_(tenants))))
    missing = [name for name in tenants if name not in known]
    if missing:
        raise invalid("tenant", f"no tenant {missing[0]!r}")
    ipam_object = None
    if ipam:
        try:
            ipam_object = json.loads(ipam)
        except json.JSONDecodeError as exc:
            raise invalid("ipam", f"is not JSON ({exc.msg})") from None
        if not isinstance(ipam_object, dict) or "type" not in ipam_object:
            raise invalid("ipam", 'expected a CNI IPAM object such as {"type": "whereabouts"}')
    pattern = request.app.state.settings.kube_namespace
    namespaces = [namespace_of(name, pattern) for name in tenants]
    nodes = fleet.load_nodes(session)
    objects: list[dict[str, Any]] = []
    try:
        for one in [pool] if pool is not None else sorted(pools_of(nodes)):
            objects += network_objects(
                one, nodes, namespaces, operator_namespace=operator_namespace, ipam=ipam_object
            )
    except InvalidValue as exc:
        raise invalid(exc.field, exc.problem) from None
    if format == "yaml":
        return Response(yaml.safe_dump_all(objects, sort_keys=False), media_type="application/yaml")
    return objects
