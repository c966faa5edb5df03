"""A Python client for the gpuaas control plane's REST API.

Every route of the API has a method; answers are the API's JSON (camelCase dicts). Lists come a
page at a time (``list_*`` returns a :class:`Page`) or as a generator that follows the cursor
(``iter_*``). Any error answer raises :class:`ApiError` carrying the problem document's detail
and the fields at fault, so a caller can show exactly what the server said.

The methods of the governance kinds (``list_flavors``, ``create_local_queue``,
``update_priority_class`` ...) are generated from the API's resource table
(:data:`gpuaas.model.api_kinds.KINDS`), the same entries that generate the server's routes.

    from gpuaas.client import Client

    with Client("http://127.0.0.1:8080", token) as gpu:
        job = gpu.submit_job("acme", {"name": "train", "queue": "default", ...})
        for event in gpu.job_events("acme", job["id"]):
            print(event)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from gpuaas.model.api_kinds import KINDS, ApiKind

DEFAULT_TIMEOUT = 30.0
JSON = Any


class ApiError(Exception):
    """An error answer: its HTTP status, the problem's detail and the per-field errors."""

    def __init__(self, status: int, detail: str, errors: list[dict[str, Any]] | None = None):
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail
        #: ``{field, message}``, and for a batch ``document`` (from 0) and ``name``
        self.errors: list[dict[str, Any]] = errors or []

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """Read an RFC 9457 problem document; fall back to the raw text for anything else
        (a proxy's HTML page, an empty body)."""
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            detail = body.get("detail") or body.get("title") or response.reason_phrase
            raw_errors = body.get("errors") or []
            errors: list[dict[str, Any]] = []
            for e in raw_errors:
                if not isinstance(e, dict):
                    continue
                error: dict[str, Any] = {
                    "field": str(e.get("field", "")),
                    "message": str(e.get("message", "")),
                }
                if isinstance(e.get("document"), int):
                    error["document"] = e["document"]
                    error["name"] = e.get("name")
                errors.append(error)
            return cls(response.status_code, str(detail), errors)
        text = response.text.strip()[:500] or response.reason_phrase or "error"
        return cls(response.status_code, text)


@dataclass(slots=True)
class Page:
    """One page of a list; pass ``next`` as ``after`` to fetch the following one."""

    items: list[JSON] = field(default_factory=list)
    next: str | None = None


class JobLogs(str):
    """A job's output as text, and what the server said about it: ``attempt`` (None: the job
    has none yet), ``state`` (``output``, ``none-yet``, ``none``) and ``truncated`` (a cap of
    the server's cut lines: ask for ``tail``)."""

    attempt: int | None
    state: str
    truncated: bool

    @classmethod
    def from_response(cls, response: httpx.Response) -> JobLogs:
        logs = cls(response.text)
        attempt = response.headers.get("x-gpuaas-log-attempt")
        logs.attempt = int(attempt) if attempt and attempt.isdigit() else None
        logs.state = response.headers.get("x-gpuaas-log-state", "output")
        logs.truncated = response.headers.get("x-gpuaas-log-truncated") == "true"
        return logs


def _seg(value: object) -> str:
    """One path segment, escaped (names are DNS labels, but a typo must not change the route)."""
    return quote(str(value), safe="")


def _query(**params: object) -> dict[str, Any]:
    """Query parameters without the ones left unset; booleans as the API spells them."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else value
    return out


def _logs_request(
    tenant: str,
    job_id: int | str,
    pod: int | None,
    tail: int | None,
    stream: str,
    attempt: int | None,
) -> tuple[str, dict[str, Any]]:
    """The path and query of a job's logs, shared by reading them now and following them."""
    path = f"/v1/tenants/{_seg(tenant)}/jobs/{_seg(job_id)}/logs"
    return path, _query(pod=pod, tail=tail, stream=stream, attempt=attempt)


def _body(**fields: object) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _decode(response: httpx.Response) -> JSON:
    if response.is_error:
        raise ApiError.from_response(response)
    if response.status_code == 204 or not response.content:
        return None
    if "json" in response.headers.get("content-type", ""):
        return response.json()
    return response.text


def _page(data: JSON) -> Page:
    if not isinstance(data, dict) or "items" not in data:
        raise ApiError(502, f"expected a page {{items, next}} from the server, got {data!r:.200}")
    return Page(items=list(data["items"]), next=data.get("next"))


class Client:
    """A synchronous client; one keep-alive connection pool, safe to reuse across calls.

    ``transport`` lets tests or proxies plug in an httpx transport; :meth:`from_httpx` wraps an
    existing ``httpx.Client`` (for instance FastAPI's ``TestClient``) instead.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, transport=transport, timeout=timeout)
        self._owns_http = True
        self._headers = {"Authorization": f"Bearer {token}"}

    @classmethod
    def from_httpx(cls, http: httpx.Client, token: str) -> Client:
        """Speak through ``http`` (its base URL and transport); closing this client leaves it
        open, since its owner decides its lifetime."""
        client = cls.__new__(cls)
        client.url = str(http.base_url).rstrip("/")
        client._http = http
        client._owns_http = False
        client._headers = {"Authorization": f"Bearer {token}"}
        return client

    @classmethod
    def from_config(cls, *, timeout: float = DEFAULT_TIMEOUT) -> Client:
        """The server and token of ``gpuaas login`` (or $GPUAAS_URL / $GPUAAS_TOKEN)."""
        from gpuaas.client.config import load_credentials

        credentials = load_credentials()
        return cls(credentials.url, credentials.token, timeout=timeout)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: JSON = None,
        content: str | bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> JSON:
        """Send one request; the decoded answer, or :class:`ApiError` for any 4xx/5xx."""
        response = self._http.request(
            method,
            path,
            params=params,
            json=json,
            content=content,
            headers={**self._headers, **(headers or {})},
        )
        return _decode(response)

    def _list(self, path: str, limit: int | None, after: str | None, **filters: object) -> Page:
        return _page(self.request("GET", path, params=_query(limit=limit, after=after, **filters)))

    def _iter(self, path: str, page_size: int = 500, **filters: object) -> Iterator[JSON]:
        after: str | None = None
        while True:
            page = self._list(path, page_size, after, **filters)
            yield from page.items
            if not page.next:
                return
            after = page.next

    # -- identity ---------------------------------------------------------------------------

    def whoami(self) -> JSON:
        """``{user, platformRole, tenants: [{tenant, role}]}`` of the token in use."""
        return self.request("GET", "/v1/whoami")

    def list_tenants(self, limit: int | None = None, after: str | None = None) -> Page:
        return self._list("/v1/tenants", limit, after)

    def iter_tenants(self) -> Iterator[JSON]:
        return self._iter("/v1/tenants")

    def get_tenant(self, tenant: str) -> JSON:
        return self.request("GET", f"/v1/tenants/{_seg(tenant)}")

    def create_tenant(
        self,
        name: str,
        *,
        display_name: str | None = None,
        capacity: Mapping[str, Mapping[str, Any]] | None = None,
        parent_cohort: str | None = None,
        borrowing: Mapping[str, Mapping[str, Any]] | None = None,
        lending: Mapping[str, Mapping[str, Any]] | None = None,
        max_job: Mapping[str, Any] | None = None,
        priority_ceiling: int | None = None,
        storage_quota: str | int | None = None,
    ) -> JSON:
        """``capacity``: ``{flavor: {resource: quantity}}``, the grant the tenant's own queues
        share; the other terms are the provider's (docs/api.md, "The tenancy boundary"):
        the Cohort its root hangs from, what it may borrow and lend there (same shape), the
        most one job may ask for (``{resource: quantity}``), its priority ceiling, the most
        bytes its volumes may hold (``storage_quota``, a quantity: ``10Ti``)."""
        body = _body(
            name=name,
            displayName=display_name,
            capacity=capacity,
            parentCohort=parent_cohort,
            borrowing=borrowing,
            lending=lending,
            maxJob=max_job,
            priorityCeiling=priority_ceiling,
            storageQuota=storage_quota,
        )
        return self.request("POST", "/v1/tenants", json=body)

    def update_tenant(
        self,
        tenant: str,
        *,
        display_name: str | None = None,
        capacity: Mapping[str, Mapping[str, Any]] | None = None,
        parent_cohort: str | None = None,
        borrowing: Mapping[str, Mapping[str, Any]] | None = None,
        lending: Mapping[str, Mapping[str, Any]] | None = None,
        max_job: Mapping[str, Any] | None = None,
        priority_ceiling: int | None = None,
        storage_quota: str | int | None = None,
        clear: Iterable[str] = (),
    ) -> JSON:
        """Change the given fields (``None``: left as they are); ``clear`` names the ones to
        remove (``"parentCohort"``, ``"priorityCeiling"``, ``"storageQuota"``)."""
        body = _body(
            displayName=display_name,
            capacity=capacity,
            parentCohort=parent_cohort,
            borrowing=borrowing,
            lending=lending,
            maxJob=max_job,
            priorityCeiling=priority_ceiling,
            storageQuota=storage_quota,
        )
        body.update(dict.fromkeys(clear))
        return self.request("PATCH", f"/v1/tenants/{_seg(tenant)}", json=body)

    def delete_tenant(self, tenant: str) -> None:
        self.request("DELETE", f"/v1/tenants/{_seg(tenant)}")

    def list_users(self, limit: int | None = None, after: str | None = None) -> Page:
        return self._list("/v1/users", limit, after)

    def iter_users(self) -> Iterator[JSON]:
        return self._iter("/v1/users")

    def get_user(self, user: str) -> JSON:
        return self.request("GET", f"/v1/users/{_seg(user)}")

    def create_user(
        self, name: str, *, display_name: str | None = None, platform_role: str | None = None
    ) -> JSON:
        """``platform_role``: ``provider-admin`` or ``viewer`` (None: tenant roles only)."""
        body = _body(name=name, displayName=display_name, platformRole=platform_role)
        return self.request("POST", "/v1/users", json=body)

    def update_user(self, user: str, **fields: Any) -> JSON:
        """Fields as the API spells them (``displayName``, ``platformRole``, ``disabled``)."""
        return self.request("PATCH", f"/v1/users/{_seg(user)}", json=fields)

    def delete_user(self, user: str) -> None:
        self.request("DELETE", f"/v1/users/{_seg(user)}")

    def list_members(self, tenant: str, limit: int | None = None, after: str | None = None) -> Page:
        return self._list(f"/v1/tenants/{_seg(tenant)}/members", limit, after)

    def iter_members(self, tenant: str) -> Iterator[JSON]:
        return self._iter(f"/v1/tenants/{_seg(tenant)}/members")

    def set_member(self, tenant: str, user: str, role: str) -> JSON:
        """Give ``user`` (created when missing) ``role`` in the tenant: tenant-admin,
        tenant-user or viewer. A user that exists already is invited instead (``status``:
        ``invited``) unless a provider-admin calls this."""
        path = f"/v1/tenants/{_seg(tenant)}/members/{_seg(user)}"
        return self.request("PUT", path, json={"role": role})

    def remove_member(self, tenant: str, user: str) -> None:
        self.request("DELETE", f"/v1/tenants/{_seg(tenant)}/members/{_seg(user)}")

    def create_member_token(
        self, tenant: str, user: str, name: str, *, expires_in: int | None = None
    ) -> JSON:
        """A token for a member of the tenant (tenant-admin); its secret is in ``token``, once."""
        path = f"/v1/tenants/{_seg(tenant)}/members/{_seg(user)}/tokens"
        return self.request("POST", path, json=_body(name=name, expiresIn=expires_in))

    def list_invitations(self, limit: int | None = None, after: str | None = None) -> Page:
        """The caller's pending invitations."""
        return self._list("/v1/invitations", limit, after)

    def list_tenant_invitations(
        self, tenant: str, limit: int | None = None, after: str | None = None
    ) -> Page:
        return self._list(f"/v1/tenants/{_seg(tenant)}/invitations", limit, after)

    def accept_invitation(self, tenant: str, user: str) -> JSON:
        """Accept ``user``'s invitation to ``tenant`` (the user itself, or a provider-admin)."""
        path = f"/v1/tenants/{_seg(tenant)}/invitations/{_seg(user)}/accept"
        return self.request("POST", path)

    def delete_invitation(self, tenant: str, user: str) -> None:
        """Withdraw (tenant-admin) or decline (the invited user) an invitation."""
        self.request("DELETE", f"/v1/tenants/{_seg(tenant)}/invitations/{_seg(user)}")

    def list_tokens(
        self, limit: int | None = None, after: str | None = None, *, all_users: bool = False
    ) -> Page:
        """Your live tokens; ``all_users``: every user's (platform roles)."""
        return self._list("/v1/tokens", limit, after, allUsers=True if all_users else None)

    def list_user_tokens(
        self, user: str, limit: int | None = None, after: str | None = None
    ) -> Page:
        """A user's live tokens (platform roles: any user; everyone: itself)."""
        return self._list(f"/v1/users/{_seg(user)}/tokens", limit, after)

    def create_user_token(self, user: str, name: str, *, expires_in: int | None = None) -> JSON:
        """A personal token for ``user`` carrying its roles now (provider-admin)."""
        path = f"/v1/users/{_seg(user)}/tokens"
        return self.request("POST", path, json=_body(name=name, expiresIn=expires_in))

    def list_tenant_tokens(
        self, tenant: str, limit: int | None = None, after: str | None = None
    ) -> Page:
        """The live tokens minted in a tenant (its tenant-admins, the provider)."""
        return self._list(f"/v1/tenants/{_seg(tenant)}/tokens", limit, after)

    def revoke_tenant_token(self, tenant: str, token_id: int | str) -> None:
        self.request("DELETE", f"/v1/tenants/{_seg(tenant)}/tokens/{_seg(token_id)}")

    def iter_tokens(self) -> Iterator[JSON]:
        return self._iter("/v1/tokens")

    def create_token(self, name: str, *, expires_in: int | None = None) -> JSON:
        """A new token of the caller; its secret is in ``token`` and is never shown again."""
        return self.request("POST", "/v1/tokens", json=_body(name=name, expiresIn=expires_in))

    def revoke_token(self, token_id: int | str) -> None:
        self.request("DELETE", f"/v1/tokens/{_seg(token_id)}")

    # -- fleet ------------------------------------------------------------------------------

    def list_nodes(
        self,
        limit: int | None = None,
        after: str | None = None,
        *,
        model: str | None = None,
        cordoned: bool | None = None,
        pool: str | None = None,
    ) -> Page:
        return self._list("/v1/nodes", limit, after, model=model, cordoned=cordoned, pool=pool)

    def iter_nodes(
        self, *, model: str | None = None, cordoned: bool | None = None, pool: str | None = None
    ) -> Iterator[JSON]:
        return self._iter("/v1/nodes", model=model, cordoned=cordoned, pool=pool)

    def get_node(self, node: str) -> JSON:
        return self.request("GET", f"/v1/nodes/{_seg(node)}")

    # -- GPU utilisation (docs/telemetry.md) --------------------------------------------------

    def node_utilization(self, node: str) -> JSON:
        """The node's devices over the rolling window, the jobs on each, and why its telemetry
        is missing or partial (platform roles)."""
        return self.request("GET", f"/v1/nodes/{_seg(node)}/utilization")

    def job_utilization(self, tenant: str, job_id: int | str) -> JSON:
        """The job's devices over the rolling window (``window`` null while it holds none;
        ``known`` false while its telemetry is stale)."""
        return self.request("GET", f"/v1/tenants/{_seg(tenant)}/jobs/{_seg(job_id)}/utilization")

    def cluster_utilization(self, tenant: str, name: str) -> JSON:
        """The tenant cluster's nodes over the rolling window, idle devices included."""
        path = f"/v1/tenants/{_seg(tenant)}/clusters/{_seg(name)}/utilization"
        return self.request("GET", path)

    def network_manifest(
        self,
        pool: str | None = None,
        tenants: list[str] | None = None,
        *,
        operator_namespace: str | None = None,
        ipam: str | None = None,
        yaml: bool = False,
    ) -> JSON:
        """The SR-IOV objects that make NIC ``pool`` (None: every pool) usable from ``tenants``'
        pods (None: every tenant's; platform roles): a list of objects, or with ``yaml`` one
        YAML stream."""
        params = _query(
            pool=pool,
            tenant=list(tenants) if tenants else None,
            operatorNamespace=operator_namespace,
            ipam=ipam,
            format="yaml" if yaml else None,
        )
        return self.request("GET", "/v1/network/manifests", params=params)

    def register_nodes(self, entry: Mapping[str, Any]) -> JSON:
        """Register nodes, all or none; returns the nodes created. ``entry`` is one inventory
        ``nodes:`` entry (it may use ``count`` and name patterns), a whole inventory
        (``kind: Fleet``), Kubernetes Node objects (``Node``/``NodeList``/``List``), or a fleet
        file's text as ``{"content": TEXT, "source": "nodes.csv"}`` (see
        :meth:`register_fleet_file`)."""
        return self.request("POST", "/v1/nodes", json=dict(entry))

    def register_fleet_file(self, path: str | PathLike[str]) -> JSON:
        """Register the nodes of a fleet file in any format ``gpuaas fleet show`` reads; the
        server parses it."""
        file = Path(path)
        content = file.read_text(encoding="utf-8")
        return self.register_nodes({"content": content, "source": file.name})

    def apply_nodes(self, body: Mapping[str, Any]) -> JSON:
        """Register or replace nodes (``PUT /v1/nodes``; the bodies ``register_nodes`` takes):
        ``{created, updated, unchanged}`` by name."""
        return self.request("PUT", "/v1/nodes", json=dict(body))

    def cordon_node(self, node: str) -> JSON:
        return self.request("POST", f"/v1/nodes/{_seg(node)}/cordon")

    def uncordon_node(self, node: str) -> JSON:
        return self.request("POST", f"/v1/nodes/{_seg(node)}/uncordon")

    def drain_node(self, node: str) -> JSON:
        """Cordon, and have the reconciler requeue the jobs running there."""
        return self.request("POST", f"/v1/nodes/{_seg(node)}/drain")

    def partition_node(self, node: str, partitioning: Mapping[str, Any]) -> JSON:
        return self.request("PUT", f"/v1/nodes/{_seg(node)}/partition", json=dict(partitioning))

    def delete_node(self, node: str) -> None:
        self.request("DELETE", f"/v1/nodes/{_seg(node)}")

    # -- governance -------------------------------------------------------------------------
    # list_<plural>, iter_<plural>, get_/create_/update_/delete_<singular> of every kind of the
    # one resource table are generated below the class (:func:`_bind_kind`); these do the work.

    def _kind_path(self, kind: ApiKind, tenant: str | None, name: str | None = None) -> str:
        if tenant is not None and "tenant" not in kind.scopes:
            raise TypeError(f"{kind.plural} are the provider's only: no tenant=")
        if tenant is None and "provider" not in kind.scopes:
            raise TypeError(f"{kind.plural} belong to a tenant: give tenant=")
        base = (
            f"/v1/tenants/{_seg(tenant)}/{kind.path}" if tenant is not None else f"/v1/{kind.path}"
        )
        return base if name is None else f"{base}/{_seg(name)}"

    @staticmethod
    def _kind_body(
        kind: ApiKind, tenant: str | None, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        """``{name, ...}``: the kind's fields from positional ``args`` (in the table's order)
        and keywords (the SDK's snake_case names), None left out."""
        fields = kind.fields_for("tenant" if tenant is not None else "provider")
        if len(args) > len(fields):
            raise TypeError(f"{kind.singular}: at most {len(fields)} fields after the name")
        given = dict(zip((f.python for f in fields), args, strict=False))
        for key, value in kwargs.items():
            if key in given:
                raise TypeError(f"{kind.singular}: {key} given twice")
            given[key] = value
        known = {f.python: f for f in fields}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise TypeError(
                f"{kind.singular}: unknown field(s) {', '.join(unknown)} "
                f"(fields here: {', '.join(known) or 'none'})"
            )
        body: dict[str, Any] = {"name": name}
        for key, value in given.items():
            if value is not None:
                body[known[key].api] = dict(value) if known[key].type == "spec" else value
        return body

    def _kind_list(
        self,
        kind: ApiKind,
        limit: int | None = None,
        after: str | None = None,
        *,
        tenant: str | None = None,
        **filters: Any,
    ) -> Page:
        return self._list(self._kind_path(kind, tenant), limit, after, **_filters(kind, filters))

    def _kind_iter(
        self, kind: ApiKind, *, tenant: str | None = None, **filters: Any
    ) -> Iterator[JSON]:
        return self._iter(self._kind_path(kind, tenant), **_filters(kind, filters))

    def _kind_get(self, kind: ApiKind, name: str, *, tenant: str | None = None) -> JSON:
        return self.request("GET", self._kind_path(kind, tenant, name))

    def _kind_create(
        self, kind: ApiKind, name: str, *args: Any, tenant: str | None = None, **fields: Any
    ) -> JSON:
        body = self._kind_body(kind, tenant, name, args, fields)
        return self.request("POST", self._kind_path(kind, tenant), json=body)

    def _kind_update(
        self, kind: ApiKind, name: str, *args: Any, tenant: str | None = None, **fields: Any
    ) -> JSON:
        body = self._kind_body(kind, tenant, name, args, fields)
        return self.request("PUT", self._kind_path(kind, tenant, name), json=body)

    def _kind_delete(self, kind: ApiKind, name: str, *, tenant: str | None = None) -> None:
        self.request("DELETE", self._kind_path(kind, tenant, name))

    def preload_dataset(self, name: str, nodes: Sequence[str], *, tenant: str) -> JSON:
        """Warm dataset ``name`` on ``nodes`` (``POST .../datasets/{name}/preload``): the view,
        its caches on those nodes ``loading`` until the reconciler has run the preload."""
        path = f"/v1/tenants/{_seg(tenant)}/datasets/{_seg(name)}/preload"
        return self.request("POST", path, json={"nodes": list(nodes)})

    # -- invoices, showback, allocation (budgets come from the resource table) --------------

    def list_invoices(self, tenant: str) -> JSON:
        """Every month of ``tenant`` with usage or lines (open or closed), oldest first."""
        return self.request("GET", f"/v1/tenants/{_seg(tenant)}/invoices")

    def get_invoice(self, tenant: str, period: str) -> JSON:
        """``tenant``'s invoice for month ``period`` (``YYYY-MM``)."""
        return self.request("GET", f"/v1/tenants/{_seg(tenant)}/invoices/{_seg(period)}")

    def add_invoice_line(
        self, tenant: str, period: str, kind: str, amount: str, description: str
    ) -> JSON:
        """A ``credit`` (taken off) or an ``adjustment`` on an open month (provider-admin)."""
        path = f"/v1/tenants/{_seg(tenant)}/invoices/{_seg(period)}/lines"
        body = {"kind": kind, "amount": str(amount), "description": description}
        return self.request("POST", path, json=body)

    def close_invoice(self, tenant: str, period: str) -> JSON:
        """Close an ended month: its invoice never changes again (provider-admin)."""
        path = f"/v1/tenants/{_seg(tenant)}/invoices/{_seg(period)}/close"
        return self.request("POST", path)

    def export_focus(self, tenant: str, period: str, format: str = "csv") -> bytes:
        """The invoice as FOCUS 1.2 rows: CSV text or Parquet, as bytes."""
        path = f"/v1/tenants/{_seg(tenant)}/invoices/{_seg(period)}/focus"
        response = self._http.get(path, params={"format": format}, headers=self._headers)
        if response.is_error:
            raise ApiError.from_response(response)
        return response.content

    def showback(self, tenant: str, period: str, by: str = "user") -> JSON:
        """What ``tenant``'s month cost by user, queue, cluster, job or sku."""
        params = {"period": period, "by": by}
        return self.request("GET", f"/v1/tenants/{_seg(tenant)}/showback", params=params)

    def allocation(
        self, start: float, end: float, aggregate: str = "tenant", *,
        include_idle: bool = True, share_idle: bool = False,
    ) -> JSON:  # fmt: skip
        """The fleet's capacity over ``[start, end)``: allocated, idle, spot (platform)."""
        params = {"start": start, "end": end, "aggregate": aggregate,
                  "includeIdle": include_idle, "shareIdle": share_idle}  # fmt: skip
        return self.request("GET", "/v1/allocation", params=params)

    # --- usage (docs/billing.md) ---------------------------------------------------------

    def list_usage(
        self, *, tenant: str | None = None, period: str | None = None,
        start: float | str | None = None, end: float | str | None = None,
        limit: int = 1000, after: str | None = None, scope_tenant: str | None = None,
        **filters: Any,
    ) -> JSON:  # fmt: skip
        """One page of usage records (``{items, next}``): a tenant's with ``tenant`` (as its
        member), else every tenant's (provider roles; ``scope_tenant`` narrows it to one
        tenant). ``filters``: ``user``, ``job``, ``sku``, ``cluster``, ``queue``."""
        params = {"period": period, "start": start, "end": end, "limit": limit, "after": after}
        params.update(filters)
        if scope_tenant and not tenant:
            params["tenant"] = scope_tenant
        path = f"/v1/tenants/{_seg(tenant)}/usage" if tenant else "/v1/usage"
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def iter_usage(self, **kwargs: Any) -> Iterator[JSON]:
        """Every usage record :meth:`list_usage` would page through."""
        after = kwargs.pop("after", None)
        while True:
            page = self.list_usage(after=after, **kwargs)
            yield from page["items"]
            after = page.get("next")
            if not after:
                return

    def usage_summary(
        self, *, tenant: str | None = None, period: str | None = None,
        start: float | str | None = None, end: float | str | None = None,
        by: Sequence[str] | None = None, scope_tenant: str | None = None,
    ) -> JSON:  # fmt: skip
        """Totals of usage per group (``by``: tenant, user, queue, cluster, job_id, sku,
        period, currency, node): a tenant's with ``tenant``, else the provider's view
        (``scope_tenant`` narrows it to one tenant)."""
        params: dict[str, Any] = {"period": period, "start": start, "end": end}
        if by:
            params["by"] = ",".join(by)
        if scope_tenant and not tenant:
            params["tenant"] = scope_tenant
        path = f"/v1/tenants/{_seg(tenant)}/usage/summary" if tenant else "/v1/usage/summary"
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def idle_pool_usage(self, period: str | None = None) -> JSON:
        """The idle-capacity pool's GPU-seconds by period, GPU model and MIG profile."""
        params = {"period": period} if period else None
        return self.request("GET", "/v1/idle-pool/usage", params=params)

    def import_kueue(
        self,
        yaml_text: str,
        *,
        dry_run: bool = False,
        namespace_map: Mapping[str, str] | None = None,
        tenant: str | None = None,
    ) -> JSON:
        """Kueue objects as multi-document YAML, unchanged; ``dry_run`` validates only.
        ``namespace_map`` sends LocalQueue namespaces to tenants, ``tenant`` every namespace the
        map does not name (by default a namespace is the tenant of the same name)."""
        entries = [f"{ns}={t}" for ns, t in (namespace_map or {}).items()]
        return self.request(
            "POST",
            "/v1/kueue/import",
            params=_query(dryRun=dry_run or None, namespaceMap=entries or None, tenant=tenant),
            content=yaml_text.encode("utf-8"),
            headers={"Content-Type": "application/yaml"},
        )

    def export_kueue(self) -> str:
        """Every governance object as Kueue YAML (multi-document)."""
        return str(self.request("GET", "/v1/kueue/export") or "")

    def export_scheduler_queues(self, scheduler: str, *, tenant: str | None = None) -> str:
        """The governance as ``scheduler``'s queues (``kai``: ``scheduling.run.ai/v2``,
        ``volcano``: ``scheduling.volcano.sh/v1beta1``), multi-document YAML; ``tenant``: only
        that tenant's queues and the cohorts above them."""
        return str(
            self.request("GET", f"/v1/{_seg(scheduler)}/export", params=_query(tenant=tenant)) or ""
        )

    def import_scheduler_queues(
        self,
        scheduler: str,
        yaml_text: str,
        *,
        flavor: str | None = None,
        cohort: str | None = None,
        dry_run: bool = False,
        namespace_map: Mapping[str, str] | None = None,
        tenant: str | None = None,
    ) -> JSON:
        """KAI or Volcano Queues as Cohorts and ClusterQueues on ``flavor``; a field with no
        Kueue equivalent is refused (422 naming it). ``cohort``: the cohort of top-level leaf
        queues; ``namespace_map``/``tenant`` place exported LocalQueues."""
        entries = [f"{ns}={t}" for ns, t in (namespace_map or {}).items()]
        return self.request(
            "POST",
            f"/v1/{_seg(scheduler)}/import",
            params=_query(
                dryRun=dry_run or None,
                flavor=flavor,
                cohort=cohort,
                namespaceMap=entries or None,
                tenant=tenant,
            ),
            content=yaml_text.encode("utf-8"),
            headers={"Content-Type": "application/yaml"},
        )

    def export_kai(self, *, tenant: str | None = None) -> str:
        """The governance as KAI scheduler ``scheduling.run.ai/v2`` Queues (YAML)."""
        return self.export_scheduler_queues("kai", tenant=tenant)

    def export_volcano(self, *, tenant: str | None = None) -> str:
        """The governance as Volcano ``scheduling.volcano.sh/v1beta1`` Queues (YAML)."""
        return self.export_scheduler_queues("volcano", tenant=tenant)

    def import_kai(self, yaml_text: str, **options: Any) -> JSON:
        """KAI Queues in (see :meth:`import_scheduler_queues`)."""
        return self.import_scheduler_queues("kai", yaml_text, **options)

    def import_volcano(self, yaml_text: str, **options: Any) -> JSON:
        """Volcano Queues in (see :meth:`import_scheduler_queues`)."""
        return self.import_scheduler_queues("volcano", yaml_text, **options)

    # -- tenant clusters (docs/clusters.md) ---------------------------------------------------

    def list_clusters(self, tenant: str) -> list[JSON]:
        """The tenant's clusters: pools, nodes, GPUs, what its jobs hold, state and reason."""
        return list(self.request("GET", f"/v1/tenants/{_seg(tenant)}/clusters") or [])

    def get_cluster(self, tenant: str, name: str) -> JSON:
        return self.request("GET", f"/v1/tenants/{_seg(tenant)}/clusters/{_seg(name)}")

    def create_cluster(self, tenant: str, spec: Mapping[str, Any]) -> JSON:
        """Carve a cluster (``{name, kind, distribution?, pools: [{name, flavor | gpuModel,
        count, min?, max?}], controlPlane?, kubernetesVersion?, sshKeys?}``); it is
        Provisioning until its provisioner has realised it."""
        return self.request("POST", f"/v1/tenants/{_seg(tenant)}/clusters", json=dict(spec))

    def scale_cluster(self, tenant: str, name: str, pools: Mapping[str, int]) -> JSON:
        """New node counts by pool name (``{"gpu": 3}``); nodes leaving are drained first."""
        body = {"pools": [{"name": pool, "count": count} for pool, count in pools.items()]}
        return self.request(
            "POST", f"/v1/tenants/{_seg(tenant)}/clusters/{_seg(name)}/scale", json=body
        )

    def delete_cluster(self, tenant: str, name: str, *, force: bool = False) -> JSON:
        """Start deleting (``force``: cancel its running jobs; refused with 409 otherwise)."""
        return self.request(
            "DELETE",
            f"/v1/tenants/{_seg(tenant)}/clusters/{_seg(name)}",
            params=_query(force=force or None),
        )

    def cluster_events(self, tenant: str, name: str) -> list[JSON]:
        path = f"/v1/tenants/{_seg(tenant)}/clusters/{_seg(name)}/events"
        return list(self.request("GET", path) or [])

    def cluster_manifest(self, tenant: str, name: str) -> list[JSON]:
        """What the provisioner realises for the cluster (Cluster API objects, the Slurm
        partition, the bare-metal allocation), as documents."""
        path = f"/v1/tenants/{_seg(tenant)}/clusters/{_seg(name)}/manifest"
        return list(self.request("GET", path) or [])

    def get_cluster_allowance(self, tenant: str) -> JSON:
        return self.request("GET", f"/v1/tenants/{_seg(tenant)}/cluster-allowance")

    def set_cluster_allowance(
        self,
        tenant: str,
        *,
        node_limit: int,
        flavors: list[str] | None = None,
        gpu_models: list[str] | None = None,
    ) -> JSON:
        """The provider's terms: the pools ``tenant`` may carve from and its node limit."""
        body = {"flavors": flavors or [], "gpuModels": gpu_models or [], "nodeLimit": node_limit}
        return self.request("PUT", f"/v1/tenants/{_seg(tenant)}/cluster-allowance", json=body)

    # -- jobs -------------------------------------------------------------------------------

    def submit_job(self, tenant: str, spec: Mapping[str, Any]) -> JSON:
        """Submit a job spec; resubmitting the same ``idempotencyKey`` returns the same job."""
        return self.request("POST", f"/v1/tenants/{_seg(tenant)}/jobs", json=dict(spec))

    def submit_jobs(
        self, tenant: str, specs: list[Mapping[str, Any]], *, dry_run: bool = False
    ) -> JSON:
        """Submit several job specs, all or none: the server checks every one before creating
        any; an error anywhere raises ApiError whose ``errors`` name each bad ``document``
        (from 0) and its ``name``. Returns ``{dryRun, items: [{document, name, created, job}]}``;
        a spec whose ``idempotencyKey`` already made a job returns that job (not created)."""
        return self.request(
            "POST",
            f"/v1/tenants/{_seg(tenant)}/jobs/batch",
            params=_query(dryRun=dry_run or None),
            json={"jobs": [dict(spec) for spec in specs]},
        )

    def list_jobs(
        self,
        tenant: str,
        limit: int | None = None,
        after: str | None = None,
        *,
        state: str | None = None,
        queue: str | None = None,
        kind: str | None = None,
        user: str | None = None,
    ) -> Page:
        path = f"/v1/tenants/{_seg(tenant)}/jobs"
        return self._list(path, limit, after, state=state, queue=queue, kind=kind, user=user)

    def iter_jobs(
        self,
        tenant: str,
        *,
        state: str | None = None,
        queue: str | None = None,
        kind: str | None = None,
        user: str | None = None,
        page_size: int = 500,
    ) -> Iterator[JSON]:
        """Every matching job of the tenant, fetched ``page_size`` at a time."""
        path = f"/v1/tenants/{_seg(tenant)}/jobs"
        return self._iter(path, page_size, state=state, queue=queue, kind=kind, user=user)

    def list_all_jobs(
        self,
        limit: int | None = None,
        after: str | None = None,
        *,
        tenant: str | None = None,
        state: str | None = None,
    ) -> Page:
        """Jobs of every tenant (platform roles)."""
        return self._list("/v1/jobs", limit, after, tenant=tenant, state=state)

    def iter_all_jobs(
        self, *, tenant: str | None = None, state: str | None = None
    ) -> Iterator[JSON]:
        return self._iter("/v1/jobs", tenant=tenant, state=state)

    def get_job(self, tenant: str, job_id: int | str) -> JSON:
        return self.request("GET", f"/v1/tenants/{_seg(tenant)}/jobs/{_seg(job_id)}")

    def cancel_job(self, tenant: str, job_id: int | str) -> JSON:
        return self.request("POST", f"/v1/tenants/{_seg(tenant)}/jobs/{_seg(job_id)}/cancel")

    def job_manifest(
        self, tenant: str, job_id: int | str, target: str | None = None, yaml: bool = False
    ) -> JSON:
        """The Kubernetes objects that run the job on ``target`` (kueue, volcano, kai; the
        server's default when None): a list of objects, or with ``yaml`` one YAML stream."""
        params = _query(target=target, format="yaml" if yaml else None)
        path = f"/v1/tenants/{_seg(tenant)}/jobs/{_seg(job_id)}/manifest"
        return self.request("GET", path, params=params)

    def job_events(self, tenant: str, job_id: int | str) -> list[JSON]:
        """The job's history (submitted, admitted, running, evicted ...), oldest first."""
        data = self.request("GET", f"/v1/tenants/{_seg(tenant)}/jobs/{_seg(job_id)}/events")
        if isinstance(data, dict) and "items" in data:
            path = f"/v1/tenants/{_seg(tenant)}/jobs/{_seg(job_id)}/events"
            items = list(data["items"])
            after = data.get("next")
            while after:
                page = self._list(path, None, after)
                items.extend(page.items)
                after = page.next
            return items
        return list(data or [])

    def job_logs(
        self,
        tenant: str,
        job_id: int | str,
        *,
        pod: int | None = None,
        tail: int | None = None,
        stream: str = "all",
        attempt: int | None = None,
    ) -> JobLogs:
        """A job's output now (docs/api.md, "Logs"): every pod's, or ``pod``'s (a rank);
        ``stream``: ``stdout``, ``stderr`` or ``all``; ``tail``: the last N lines of each file;
        ``attempt``: a run of a requeued job (default: the latest). A :class:`JobLogs` is the
        text, with what the server said about it (attempt, no output yet, truncated)."""
        path, params = _logs_request(tenant, job_id, pod, tail, stream, attempt)
        response = self._http.get(path, params=params, headers=self._headers)
        if response.is_error:
            raise ApiError.from_response(response)
        return JobLogs.from_response(response)

    def follow_job_logs(
        self,
        tenant: str,
        job_id: int | str,
        *,
        pod: int | None = None,
        tail: int | None = None,
        stream: str = "all",
        attempt: int | None = None,
    ) -> Iterator[str]:
        """The job's output line by line (without the newline) as it is written, until the job
        is finished; the same filters as :meth:`job_logs`. The stream waits as long as the job
        runs (no read timeout); closing the generator closes the connection."""
        path, params = _logs_request(tenant, job_id, pod, tail, stream, attempt)
        params["follow"] = "true"
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        with self._http.stream(
            "GET", path, params=params, headers=self._headers, timeout=timeout
        ) as response:
            if response.is_error:
                response.read()
                raise ApiError.from_response(response)
            yield from response.iter_lines()

    def list_workloads(
        self, tenant: str, limit: int | None = None, after: str | None = None
    ) -> Page:
        """The admission view: queue, cluster queue, state, why pending, flavors assigned."""
        return self._list(f"/v1/tenants/{_seg(tenant)}/workloads", limit, after)

    def iter_workloads(self, tenant: str) -> Iterator[JSON]:
        return self._iter(f"/v1/tenants/{_seg(tenant)}/workloads")


def _filters(kind: ApiKind, given: Mapping[str, Any]) -> dict[str, Any]:
    known = {f.python: f.api for f in kind.filters}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(
            f"list_{kind.plural}: unknown filter(s) {', '.join(unknown)} "
            f"(filters: {', '.join(known) or 'none'})"
        )
    return {known[k]: v for k, v in given.items()}


def _signature_text(kind: ApiKind) -> str:
    fields = ", ".join(
        f.python + ("" if f.scope is None else f" ({f.scope} only)") for f in kind.fields
    )
    scopes = {
        ("provider",): "the provider's routes only",
        ("tenant",): "tenant= is required",
        ("provider", "tenant"): "tenant=: the tenant's routes, else the provider's",
    }[kind.scopes]
    return f"fields after the name, positional or by keyword: {fields}; {scopes}"


def _bind_kind(cls: type[Client], kind: ApiKind) -> None:
    """Give ``cls`` the six methods of ``kind`` (one entry of the resource table)."""
    how = _signature_text(kind)

    def list_(self: Client, limit: int | None = None, after: str | None = None, **kw: Any) -> Page:
        return self._kind_list(kind, limit, after, **kw)

    def iter_(self: Client, **kw: Any) -> Iterator[JSON]:
        return self._kind_iter(kind, **kw)

    def get(self: Client, name: str, *, tenant: str | None = None) -> JSON:
        return self._kind_get(kind, name, tenant=tenant)

    def create(self: Client, name: str, *args: Any, **kw: Any) -> JSON:
        return self._kind_create(kind, name, *args, **kw)

    def update(self: Client, name: str, *args: Any, **kw: Any) -> JSON:
        return self._kind_update(kind, name, *args, **kw)

    def delete(self: Client, name: str, *, tenant: str | None = None) -> None:
        self._kind_delete(kind, name, tenant=tenant)

    methods = {
        f"list_{kind.plural}": (list_, f"One page of {kind.plural} ({kind.help})"),
        f"iter_{kind.plural}": (iter_, f"Every {kind.singular}, following the cursor."),
        f"get_{kind.singular}": (get, f"One {kind.singular}."),
        f"create_{kind.singular}": (create, f"Create a {kind.singular}; {how}."),
        f"update_{kind.singular}": (update, f"Replace a {kind.singular} (PUT); {how}."),
        f"delete_{kind.singular}": (delete, f"Delete a {kind.singular}."),
    }
    for name, (function, doc) in methods.items():
        function.__name__ = function.__qualname__ = name
        function.__doc__ = doc
        setattr(cls, name, function)


#: the SDK method of each verb of a kind (a test checks every kind x verb has one)
VERB_METHODS: dict[str, str] = {
    "list": "list_{plural}",
    "get": "get_{singular}",
    "create": "create_{singular}",
    "update": "update_{singular}",
    "delete": "delete_{singular}",
}

for _kind in KINDS:
    _bind_kind(Client, _kind)


class AsyncClient:
    """The asynchronous counterpart for high-concurrency callers (``gpuaas bench api``): the
    job routes and ``whoami``, over one keep-alive pool."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_connections: int = 100,
    ) -> None:
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.url, transport=transport, timeout=timeout, limits=limits
        )
        self._headers = {"Authorization": f"Bearer {token}"}

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: JSON = None,
    ) -> JSON:
        response = await self._http.request(
            method, path, params=params, json=json, headers=self._headers
        )
        return _decode(response)

    async def whoami(self) -> JSON:
        return await self.request("GET", "/v1/whoami")

    async def submit_job(self, tenant: str, spec: Mapping[str, Any]) -> JSON:
        return await self.request("POST", f"/v1/tenants/{_seg(tenant)}/jobs", json=dict(spec))

    async def submit_jobs(
        self, tenant: str, specs: list[Mapping[str, Any]], *, dry_run: bool = False
    ) -> JSON:
        return await self.request(
            "POST",
            f"/v1/tenants/{_seg(tenant)}/jobs/batch",
            params=_query(dryRun=dry_run or None),
            json={"jobs": [dict(spec) for spec in specs]},
        )

    async def list_jobs(
        self,
        tenant: str,
        limit: int | None = None,
        after: str | None = None,
        *,
        state: str | None = None,
        queue: str | None = None,
    ) -> Page:
        params = _query(limit=limit, after=after, state=state, queue=queue)
        return _page(await self.request("GET", f"/v1/tenants/{_seg(tenant)}/jobs", params=params))

    async def get_job(self, tenant: str, job_id: int | str) -> JSON:
        return await self.request("GET", f"/v1/tenants/{_seg(tenant)}/jobs/{_seg(job_id)}")

    async def cancel_job(self, tenant: str, job_id: int | str) -> JSON:
        path = f"/v1/tenants/{_seg(tenant)}/jobs/{_seg(job_id)}/cancel"
        return await self.request("POST", path)

    async def job_manifest(
        self, tenant: str, job_id: int | str, target: str | None = None, yaml: bool = False
    ) -> JSON:
        params = _query(target=target, format="yaml" if yaml else None)
        path = f"/v1/tenants/{_seg(tenant)}/jobs/{_seg(job_id)}/manifest"
        return await self.request("GET", path, params=params)
