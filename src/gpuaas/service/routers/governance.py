"""Who may use what, in Kueue's vocabulary: flavors, cohorts, cluster queues, local queues,
priority classes and hardware profiles, plus Kueue YAML import and export.

The provider owns flavors, cohorts and global objects; a tenant admin manages the tenant's own
ClusterQueues (within the capacity the provider gave), Cohorts, LocalQueues, priority classes and
hardware profiles. Every write is validated together with everything stored
(:mod:`gpuaas.service.governance`), so an invalid configuration is never stored.

The routes of the kinds are generated from the one resource table
(:data:`gpuaas.model.api_kinds.KINDS`): for each kind, scope and verb, one route that checks
the caller (the platform role on the provider's routes, the tenant role on a tenant's: read for
reads, admin for writes), then hands the validated body to the kind's service class
(:mod:`gpuaas.service.governance_kinds`). This module has no ``from __future__ import
annotations``: the generated handlers' signatures carry the table's models as real types, which
FastAPI reads.
"""

import importlib
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

import yaml
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field, create_model

from gpuaas.model.api_kinds import KINDS, METHODS, ApiKind, Scope, Verb
from gpuaas.service.auth import Need, Principal, require_platform, tenant_for
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.errors import ApiError, invalid
from gpuaas.service.governance_kinds import At
from gpuaas.service.kueue_io import NamespaceMapping, export_yaml, import_documents
from gpuaas.service.models.common import DNS_LABEL_PATTERN, MAX_LIMIT, PAGE_BOUNDS, Page
from gpuaas.service.models.governance import ImportResult
from gpuaas.service.openapi import YAML
from gpuaas.service.queue_io import export_queues, import_queues

router = APIRouter(prefix="/v1", tags=["governance"])

LimitQ = Query(100, description="page size, 1-1000", json_schema_extra=PAGE_BOUNDS)
AfterQ = Query(None, min_length=1, description="the `next` cursor of the previous page")
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")


# --- the kinds' routes, from the table -----------------------------------------------------


def resolve(reference: str) -> Any:
    """``"package.module:attribute"`` of the table, imported."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _where(kind: ApiKind, scope: Scope, write: bool) -> Callable[[dict[str, Any]], At]:
    """The check a route makes before its verb runs, and the :class:`At` it runs at."""
    if scope == "tenant":
        need = Need.ADMIN if write else Need.READ

        def at_tenant(args: dict[str, Any]) -> At:
            session, p = args["session"], args["p"]
            settings = args["request"].app.state.settings
            return At(session, p, tenant_for(session, p, args["tenant"], need), settings)

        return at_tenant

    platform_only = write or kind.provider_read == "platform"

    def at_provider(args: dict[str, Any]) -> At:
        p: Principal = args["p"]
        if platform_only:
            require_platform(p, write=write)
        return At(args["session"], p, settings=args["request"].app.state.settings)

    return at_provider


def _param(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default
    )


#: A name a tenant gives (and the provider's prices and idle pools, and every LocalQueue and
#: volume): a DNS-1123 label. Other names the provider gives are DNS-1123 subdomains.
_LABEL = {"pattern": DNS_LABEL_PATTERN, "minLength": 1, "maxLength": 63}
_SUBDOMAIN = {
    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    "minLength": 1,
    "maxLength": 253,
}
_LABEL_NAMED = {"LocalQueue", "Volume", "Price", "IdlePool", "Dataset", "Budget"}


def _name_rule(kind: ApiKind, scope: Scope) -> dict[str, Any]:
    """What the kind's service checks of a new object's name on ``scope``'s routes."""
    if kind.kind in _LABEL_NAMED:
        return _LABEL
    if scope == "tenant" and kind.kind != "WorkloadPriorityClass":
        return _LABEL  # stored as ``<tenant>.<name>`` when another tenant holds it
    return _SUBDOMAIN


def body_model(kind: ApiKind, scope: Scope, verb: Verb) -> type[BaseModel]:
    """The request model of ``verb``, as the document should say it: one model serves create
    and replace, whose ``name`` is optional because PUT takes it from the path. So create's
    body requires ``name`` (with the rule the service checks), and replace's marks it
    ``readOnly`` (a client need not send it; if sent it must equal the path's, a rule across
    path and body that JSON Schema cannot say, hence ``x-equals-path``)."""
    model: type[BaseModel] = resolve(kind.request_for(scope))
    if "name" not in model.model_fields:
        return model
    rule = _name_rule(kind, scope)
    key = (model, verb, rule["maxLength"])
    if key not in _BODIES:
        _BODIES[key] = _variant(model, verb, rule)
    return _BODIES[key]


_BODIES: dict[tuple[type[BaseModel], Verb, int], type[BaseModel]] = {}


def _variant(model: type[BaseModel], verb: Verb, rule: dict[str, Any]) -> type[BaseModel]:
    if verb == "create":
        default = model.model_fields["name"].default
        how = "Label" if rule is _LABEL else "Subdomain"
        if default is None:  # required
            field = Field(json_schema_extra=rule)
        else:
            field = Field(default=default, json_schema_extra=rule)
        return create_model(f"{model.__name__}Create{how}", __base__=model, name=(str, field))
    extra = {
        "readOnly": True,
        "x-equals-path": "name",
        "description": "the path's name (may be left out; if given, must equal it)",
    }
    field = Field(default=None, json_schema_extra=extra)
    return create_model(f"{model.__name__}Replace", __base__=model, name=(str | None, field))


def _add_route(kind: ApiKind, scope: Scope, verb: Verb, service: Any) -> None:
    method, status = METHODS[verb]
    one = verb not in ("list", "create")
    write = verb not in ("list", "get")
    view = resolve(kind.view)
    where = _where(kind, scope, write)
    params = [_param("tenant", str)] if scope == "tenant" else []
    if one:
        params.append(_param("name", str))
    if verb in ("create", "update"):
        params.append(_param("body", body_model(kind, scope, verb)))
    filters = kind.filters if scope == "provider" and verb == "list" else ()
    params += [_param(f.api, str | None, Query(None, description=f.help)) for f in filters]
    if verb == "list":
        params += [_param("limit", int, LimitQ), _param("after", str | None, AfterQ)]
    params += [_param("session", SessionDep), _param("p", PrincipalDep), _param("request", Request)]

    def endpoint(**args: Any) -> Any:
        at = where(args)
        if verb == "list":
            found = {f.api: args[f.api] for f in filters if args[f.api] is not None}
            if not 1 <= args["limit"] <= MAX_LIMIT:  # here, for every kind's list alike
                raise invalid("limit", f"must be between 1 and {MAX_LIMIT}, got {args['limit']}")
            return service.list(at, args["limit"], args["after"], **found)
        if verb == "get":
            return service.get(at, args["name"])
        if verb == "create":
            return service.create(at, args["body"])
        if verb == "update":
            return service.update(at, args["name"], args["body"])
        service.delete(at, args["name"])
        return Response(status_code=204)

    endpoint.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    endpoint.__name__ = f"{verb}_{kind.singular}" + ("_of_tenant" if scope == "tenant" else "")
    response_model = None if verb == "delete" else Page[view] if verb == "list" else view
    router.add_api_route(
        kind.route(scope, one).removeprefix("/v1"),
        endpoint,
        methods=[method],
        status_code=status,
        response_model=response_model,
        name=f"{verb} {kind.kind}" + (" of a tenant" if scope == "tenant" else ""),
        description=inspect.getdoc(type(service)),
    )


def add_kind_routes(kind: ApiKind) -> None:
    """Every route of ``kind``: each scope it has x each verb."""
    service = resolve(kind.service)()
    for scope in kind.scopes:
        for verb in kind.verbs:
            _add_route(kind, scope, verb, service)


for _kind in KINDS:
    add_kind_routes(_kind)


# --- Kueue import / export -----------------------------------------------------------------


def _parse_import(raw: bytes, content_type: str) -> list[Any]:
    """The objects of a multi-document YAML text or a JSON list (or ``kind: List``)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid("body", "must be UTF-8 text") from None
    media = content_type.split(";")[0].strip().lower()
    try:
        if media == "application/json":
            parsed = json.loads(text)
            docs = parsed if isinstance(parsed, list) else [parsed]
        elif media in YAML_TYPES or not media:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        else:
            raise ApiError(415, f"unsupported media type {media!r} (use application/yaml)")
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        what = "JSON" if media.endswith("json") else "YAML"
        raise invalid("body", f"not valid {what}: {exc}") from None
    if len(docs) == 1 and isinstance(docs[0], Mapping) and docs[0].get("kind") == "List":
        docs = docs[0].get("items") or []
    if not docs:
        raise invalid("body", "no objects to import")
    for index, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise invalid(f"body[{index}]", f"expected an object, got {type(doc).__name__}")
    return docs


_IMPORT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
        },
    }
}


@router.post("/kueue/import", response_model=ImportResult, openapi_extra=_IMPORT_BODY)
async def import_kueue(
    request: Request,
    session: SessionDep,
    p: PrincipalDep,
    dry_run: bool = Query(False, alias="dryRun", description="validate only, store nothing"),
    namespace_map: list[str] = Query(
        [],
        alias="namespaceMap",
        description="LocalQueue namespace -> tenant, as namespace=tenant (repeat, or separate "
        "with commas); by default a namespace is the tenant of the same name",
    ),
    tenant: str | None = Query(
        None, description="the tenant of every LocalQueue namespace namespaceMap does not name"
    ),
) -> ImportResult:
    """Create or replace Kueue objects (``kueue.x-k8s.io/v1beta2``; ``v1beta1`` and
    ``v1alpha1`` converted as Kueue converts them; gpuaas HardwareProfiles) from a
    multi-document YAML, validated together with what is stored: all of them are stored, or
    none. Objects that mean what is stored already are reported unchanged and left alone."""
    require_platform(p, write=True)
    mapping = NamespaceMapping.parse(namespace_map, tenant)
    docs = _parse_import(await request.body(), request.headers.get("content-type", ""))
    done = import_documents(session, docs, mapping, dry_run)
    return ImportResult(
        dry_run=dry_run, created=done.created, updated=done.updated, unchanged=done.unchanged
    )


@router.get("/kueue/export", response_class=Response, responses={200: YAML})
def export_kueue(session: SessionDep, p: PrincipalDep) -> Response:
    """Every shared object as Kueue v1beta2 YAML (HardwareProfiles as gpuaas.io/v1), as it was
    written (quantities keep their form), ready for ``kubectl apply`` or for import elsewhere;
    tenants' own priority classes are left out."""
    require_platform(p, write=False)
    return Response(export_yaml(session), media_type="application/yaml")


# --- KAI and Volcano queues out and in ----------------------------------------------------

_SCHEDULERS = {
    "kai": "KAI scheduler (Run:ai) `scheduling.run.ai/v2` Queues",
    "volcano": "Volcano `scheduling.volcano.sh/v1beta1` Queues",
}


def _add_scheduler_routes(scheduler: str, what: str) -> None:
    """``GET /v1/<scheduler>/export`` and ``POST /v1/<scheduler>/import``, with the Kueue
    routes' roles (the provider's; reading for the export, writing for the import)."""

    def export(
        session: SessionDep,
        p: PrincipalDep,
        tenant: str | None = Query(
            None, description="only this tenant's ClusterQueues and the cohorts above them"
        ),
    ) -> Response:
        require_platform(p, write=False)
        return Response(export_queues(session, scheduler, tenant), media_type="application/yaml")

    export.__doc__ = (
        f"Every Cohort and ClusterQueue as {what} (YAML), for the cluster's own scheduler; "
        "docs/kubernetes.md says how each field maps and what is refused."
    )

    async def import_(
        request: Request,
        session: SessionDep,
        p: PrincipalDep,
        dry_run: bool = Query(False, alias="dryRun", description="validate only, store nothing"),
        flavor: str | None = Query(
            None, description="the ResourceFlavor the queues' quota is on (queues have none)"
        ),
        cohort: str | None = Query(
            None, description="the cohort of top-level leaf queues (default: none)"
        ),
        namespace_map: list[str] = Query(
            [], alias="namespaceMap", description="LocalQueue namespace -> tenant, as ns=tenant"
        ),
        tenant: str | None = Query(
            None, description="the tenant of every LocalQueue namespace namespaceMap does not name"
        ),
    ) -> ImportResult:
        require_platform(p, write=True)
        mapping = NamespaceMapping.parse(namespace_map, tenant)
        docs = _parse_import(await request.body(), request.headers.get("content-type", ""))
        done = import_queues(
            session,
            scheduler,
            docs,
            flavor=flavor,
            cohort=cohort,
            mapping=mapping,
            dry_run=dry_run,
        )
        return ImportResult(
            dry_run=dry_run, created=done.created, updated=done.updated, unchanged=done.unchanged
        )

    import_.__doc__ = (
        f"Create or replace Cohorts and ClusterQueues from {what}, where they map; a field "
        "with no Kueue equivalent is a 422 naming it. Stored as a Kueue import is: all or none, "
        "unchanged objects left alone."
    )
    router.add_api_route(
        f"/{scheduler}/export",
        export,
        methods=["GET"],
        response_class=Response,
        responses={200: YAML, 404: {}, 409: {}},  # no such tenant; a name both kinds hold
        name=f"export_{scheduler}",
    )
    router.add_api_route(
        f"/{scheduler}/import",
        import_,
        methods=["POST"],
        response_model=ImportResult,
        openapi_extra=_IMPORT_BODY,
        name=f"import_{scheduler}",
    )


for _scheduler, _what in _SCHEDULERS.items():
    _add_scheduler_routes(_scheduler, _what)
