"""RBAC matrix: every route x every role x own / foreign tenant answers the exact status, and a
caller never sees another tenant's objects (nor, as a tenant-user, another user's jobs).

The route list comes from the app's OpenAPI document, so a route added without an entry in
``ROUTES`` fails ``test_every_route_has_a_matrix_entry``. The world is built once per module
through the API as the provider admin. A case expected to succeed at changing or deleting
something acts on an object made for it alone; a case expected to be refused acts on the world's
own objects (a refusal changes nothing), so the cases do not depend on their order.

Known bugs are listed in ``KNOWN_BUGS`` (and marked on the few extra tests): those cases are
``xfail(strict=True)``, so the suite stays green while each bug stays visible.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpuaas.service.app import create_app
from gpuaas.service.auth import mint_token, user_scope
from gpuaas.service.settings import Settings
from gpuaas.store.tables import REQUEST_LOGS, Base, User

ADMIN_TOKEN = "gpa_test-admin-token-0123456789"
OWN, FOREIGN = "acme", "globex"
ROLES = (
    "anonymous",
    "provider-admin",
    "platform-viewer",
    "tenant-admin",
    "tenant-user",
    "tenant-user-other",
    "tenant-viewer",
)
TENANT_ROLES = {
    "tenant-admin": "tenant-admin",
    "tenant-user": "tenant-user",
    "tenant-user-other": "tenant-user",
    "tenant-viewer": "viewer",
}
SCOPES = ("own", "foreign")
PROBLEM = "application/problem+json"


# --------------------------------------------------------------------------------------------
# The world: two tenants with queues, profiles, priority classes, users of every role, jobs.


@dataclass
class Side:
    """One tenant and everything the world made in it; every name starts with the tenant's."""

    tenant: str
    users: dict[str, str] = field(default_factory=dict)  # matrix role -> user name
    tokens: dict[str, str] = field(default_factory=dict)  # matrix role -> token
    jobs: dict[str, int] = field(default_factory=dict)  # matrix role -> id of its job
    token_ids: dict[str, int] = field(default_factory=dict)  # matrix role -> its token's id

    @property
    def cq(self) -> str:
        return f"{self.tenant}-cq"

    @property
    def lq(self) -> str:
        return f"{self.tenant}-lq"

    @property
    def cohort(self) -> str:
        return f"{self.tenant}-team"

    @property
    def cluster(self) -> str:
        return f"{self.tenant}-cl"

    @property
    def hp(self) -> str:
        return f"{self.tenant}-hp"

    @property
    def pc(self) -> str:
        return f"{self.tenant}-pc"

    @property
    def vol(self) -> str:
        return f"{self.tenant}-vol"

    @property
    def ds(self) -> str:
        return f"{self.tenant}-ds"

    @property
    def budget(self) -> str:
        return f"{self.tenant}-budget"

    @property
    def price(self) -> str:
        return f"{self.tenant}-price"

    def job_name(self, role: str) -> str:
        return f"{self.tenant}-{role}-job"

    def names(self) -> list[str]:
        """What must never appear in a response to a member of another tenant."""
        return [
            self.tenant,
            self.cq,
            self.cohort,
            self.lq,
            self.hp,
            self.pc,
            self.vol,
            self.cluster,
            self.ds,
            self.budget,
            self.price,
            *self.users.values(),
            *(self.job_name(r) for r in self.jobs),
        ]


def expect(response: httpx.Response, *codes: int) -> Any:
    """The JSON of ``response``, failing with its body when the status is not one of ``codes``."""
    assert response.status_code in codes, (
        f"{response.request.method} {response.request.url.path} -> {response.status_code}, "
        f"expected {codes}: {response.text[:500]}"
    )
    if response.headers.get("content-type", "").startswith(("application/json", PROBLEM)):
        return response.json()
    return response.text


class World:
    """The two tenants, the platform objects, and a client that can speak as any role."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.own = Side(OWN)
        self.foreign = Side(FOREIGN)
        self.platform_tokens = {"provider-admin": ADMIN_TOKEN}
        self._serial = itertools.count(1)

    # -- speaking as someone -------------------------------------------------------------
    def call(self, token: str | None, method: str, url: str, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", None) or {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return self.client.request(method, url, headers=headers, **kwargs)

    def admin(self, method: str, url: str, **kwargs: Any) -> Any:
        return expect(self.call(ADMIN_TOKEN, method, url, **kwargs), 200, 201)

    def token_of(self, role: str) -> str | None:
        """The token of ``role``: a platform one, or a member of the own tenant."""
        if role == "anonymous":
            return None
        return self.platform_tokens.get(role) or self.own.tokens[role]

    def side(self, scope: str) -> Side:
        return self.own if scope == "own" else self.foreign

    def fresh(self, prefix: str) -> str:
        """A name no other case uses."""
        return f"{prefix}-{next(self._serial)}"

    # -- building ------------------------------------------------------------------------
    def build(self) -> None:
        self.admin("POST", "/v1/flavors", json={"name": "gpu", "spec": {}})
        self.admin("POST", "/v1/cohorts", json={"name": "shared", "spec": {}})
        self.admin("POST", "/v1/priority-classes", json=priority_class("global-high", 1000))
        self.admin("POST", "/v1/nodes", json=node_entry("node-1"))
        self.admin("POST", "/v1/prices", json=price("world-price"))
        self.platform_tokens["platform-viewer"] = self.platform_user("pviewer", "viewer")
        for side in (self.own, self.foreign):
            self.build_tenant(side)
        self.admin(
            "POST",
            "/v1/hardware-profiles",
            json=hardware_profile(f"{FOREIGN}-only-hp", f"{FOREIGN}-lq", [FOREIGN]),
        )
        self.admin(
            "POST",
            "/v1/hardware-profiles",
            json=hardware_profile("shared-hp", "main", [OWN, FOREIGN]),
        )
        for side in (self.own, self.foreign):
            for role in ("tenant-admin", "tenant-user", "tenant-user-other"):
                job = expect(
                    self.call(
                        side.tokens[role],
                        "POST",
                        f"/v1/tenants/{side.tenant}/jobs",
                        json=job_spec(side.job_name(role), side.lq),
                    ),
                    201,
                )
                side.jobs[role] = job["id"]

    def create_cluster(self, tenant: str, name: str) -> None:
        """A one-node bare-metal cluster (accepted: 202)."""
        url = f"/v1/tenants/{tenant}/clusters"
        expect(self.call(ADMIN_TOKEN, "POST", url, json=cluster_body(name)), 202)

    def platform_user(self, name: str, role: str) -> str:
        self.admin("POST", "/v1/users", json={"name": name, "platformRole": role})
        return self.mint_token(name)

    def mint_token(self, user: str) -> str:
        """A token for a platform user, written to the store (the API mints tokens for tenant
        members and for oneself only)."""
        with self.client.app.state.db.session() as session:
            user_id = session.scalar(select(User.id).where(User.name == user))
            _, secret = mint_token(
                session, user_id, "matrix", user_scope(session, user_id), time.time()
            )
        return secret

    def invite(self, side: Side, user: str) -> None:
        """An invitation of an existing user (made by the provider) by the tenant's admin."""
        self.admin("POST", "/v1/users", json={"name": user})
        member = f"/v1/tenants/{side.tenant}/members/{user}"
        invited = self.call(side.tokens["tenant-admin"], "PUT", member, json={"role": "viewer"})
        assert expect(invited, 202)["status"] == "invited"

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table (a refused write must leave them as they were)."""
        with self.client.app.state.db.engine.connect() as conn:
            return {
                t.name: [tuple(r) for r in conn.execute(select(t).order_by(*t.primary_key))]
                for t in Base.metadata.sorted_tables
                if t.name not in REQUEST_LOGS
            }

    def foreign_markers(self) -> list[str]:
        return [*self.foreign.names(), f"{FOREIGN}-only-hp"]

    def build_tenant(self, side: Side) -> None:
        t = side.tenant
        self.admin("POST", "/v1/tenants", json=tenant_body(t))
        for role, tenant_role in TENANT_ROLES.items():
            user = f"{t}-{role}"
            side.users[role] = user
            self.admin("PUT", f"/v1/tenants/{t}/members/{user}", json={"role": tenant_role})
            body = self.admin(
                "POST", f"/v1/tenants/{t}/members/{user}/tokens", json={"name": "matrix"}
            )
            side.tokens[role] = str(body["token"])
            side.token_ids[role] = int(body["id"])
        self.invite(side, f"{t}-invitee")
        self.admin("POST", f"/v1/tenants/{t}/cohorts", json=tenant_cohort(side.cohort, t))
        self.admin("POST", f"/v1/tenants/{t}/cluster-queues", json=cluster_queue(side.cq))
        self.admin("POST", f"/v1/tenants/{t}/local-queues", json=local_queue(side.lq, side.cq))
        self.admin("POST", f"/v1/tenants/{t}/priority-classes", json=priority_class(side.pc, 10))
        self.admin(
            "POST", f"/v1/tenants/{t}/hardware-profiles", json=hardware_profile(side.hp, side.lq)
        )
        self.admin("POST", f"/v1/tenants/{t}/local-queues", json=local_queue("main", side.cq))
        self.admin("POST", f"/v1/tenants/{t}/volumes", json=volume(side.vol))
        self.admin("PUT", f"/v1/tenants/{t}/cluster-allowance",
                   json={"flavors": ["gpu"], "nodeLimit": 100})  # fmt: skip
        self.admin("POST", "/v1/nodes", json=node_entry(f"{t}-node"))
        self.create_cluster(t, side.cluster)
        self.admin("POST", f"/v1/tenants/{t}/datasets", json=dataset(side.ds))
        self.admin("POST", f"/v1/tenants/{t}/budgets", json=budget(side.budget))
        self.admin("POST", f"/v1/tenants/{t}/prices", json=price(side.price))


# -- valid bodies ----------------------------------------------------------------------------


def volume(name: str) -> dict[str, Any]:
    return {"name": name, "size": "1Mi"}


def tenant_body(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "displayName": f"{name} inc.",
        "capacity": {"gpu": {"nvidia.com/gpu": "1000", "cpu": "100000", "memory": "100Ti"}},
    }


def dataset(name: str, side: Side | None = None) -> dict[str, Any]:
    return {"name": name, "uri": f"s3://bucket/{name}", "size": "1Gi"}


def budget(name: str, side: Side | None = None) -> dict[str, Any]:
    return {"name": name, "amount": "100", "thresholds": [50]}


_MONTHS = itertools.count()


def invoice_line(w: World, role: str, scope: str, ok: bool) -> Call:
    """A credit on the tenant's current month (open: the world closes no current month)."""
    now = time.gmtime()
    period = f"{now.tm_year:04d}-{now.tm_mon:02d}"
    return Call((w.side(scope).tenant, period), {"kind": "credit", "amount": "1",
                                                 "description": "matrix"})  # fmt: skip


def close_month(w: World, role: str, scope: str, ok: bool) -> Call:
    """A past month no case closed yet (each case its own)."""
    n = next(_MONTHS)
    return Call((w.side(scope).tenant, f"{2001 + n // 12:04d}-{n % 12 + 1:02d}"))


def past_month(w: World, role: str, scope: str, ok: bool) -> Call:
    return Call((w.side(scope).tenant, "2000-01"))


_PRICE_FROM = itertools.count(1_700_000_000, 3600)


def price(name: str, side: Side | None = None) -> dict[str, Any]:
    """A price entry starting at a time no other entry starts at (so none overlap)."""
    return {"name": name, "sku": "H100-80GB/whole@on-demand", "listPerHour": "2.5",
            "validFrom": next(_PRICE_FROM)}  # fmt: skip


def preload_tmp(w: World, role: str, scope: str, ok: bool) -> Call:
    """A preload of a dataset made for the case (the world's own when it must be refused)."""
    side = w.side(scope)
    name = side.ds
    if ok:
        name = w.fresh("tmp-ds")
        w.admin("POST", f"/v1/tenants/{side.tenant}/datasets", json=dataset(name))
    return Call((side.tenant, name), {"nodes": ["node-1"]})


def node_entry(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "cpu": "64",
        "memory": "512Gi",
        "gpus": {"model": "H100-80GB", "count": 8},
    }


def cluster_body(name: str) -> dict[str, Any]:
    pool = {"name": "p", "flavor": "gpu", "count": 1, "min": 0, "max": 2}
    return {"name": name, "kind": "baremetal", "pools": [pool]}


def cluster_queue(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "gpu",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "1"}],
                        }
                    ],
                }
            ],
        },
    }


def tenant_cohort(name: str, parent: str) -> dict[str, Any]:
    return {"name": name, "spec": {"parentName": parent}}


def local_queue(name: str, cq: str) -> dict[str, Any]:
    return {"name": name, "clusterQueue": cq}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"name": name, "value": value}


def hardware_profile(name: str, lq: str, allowed: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "displayName": f"profile {name}",
        "localQueue": lq,
        "resources": [{"name": "nvidia.com/gpu", "min": "1", "default": "1", "max": "8"}],
    }
    if allowed:
        spec["allowedTenants"] = allowed
    return {"name": name, "spec": spec}


def job_spec(name: str, queue: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "training",
        "queue": queue,
        "command": ["true"],
        "podSets": [{"name": "workers", "count": 1, "resources": {"nvidia.com/gpu": 1}}],
        "duration": 60,
    }


# --------------------------------------------------------------------------------------------
# Expectations: per role, (own tenant, foreign tenant); OK stands for the route's success code.

OK = 0
Table = dict[str, tuple[int, int]]


def table(
    anonymous: int = 401,
    provider_admin: tuple[int, int] = (OK, OK),
    platform_viewer: tuple[int, int] = (OK, OK),
    tenant_admin: tuple[int, int] = (OK, 404),
    tenant_user: tuple[int, int] = (OK, 404),
    tenant_user_other: tuple[int, int] | None = None,
    tenant_viewer: tuple[int, int] = (OK, 404),
) -> Table:
    return {
        "anonymous": (anonymous, anonymous),
        "provider-admin": provider_admin,
        "platform-viewer": platform_viewer,
        "tenant-admin": tenant_admin,
        "tenant-user": tenant_user,
        "tenant-user-other": tenant_user_other or tenant_user,
        "tenant-viewer": tenant_viewer,
    }


DENIED = (403, 403)
#: no authentication at all (health, metrics)
PUBLIC = table(anonymous=OK, tenant_admin=(OK, OK), tenant_user=(OK, OK), tenant_viewer=(OK, OK))
#: any authenticated caller (whoami, own tokens, global catalogue reads)
ANY_AUTH = table(tenant_admin=(OK, OK), tenant_user=(OK, OK), tenant_viewer=(OK, OK))
#: provider routes, reads: platform roles only
PLATFORM_READ = table(tenant_admin=DENIED, tenant_user=DENIED, tenant_viewer=DENIED)
#: provider routes, writes: the provider admin only
PLATFORM_WRITE = table(
    platform_viewer=DENIED, tenant_admin=DENIED, tenant_user=DENIED, tenant_viewer=DENIED
)
#: /v1/tenants/{t}/... with Need.READ
TENANT_READ = table()
#: /v1/tenants/{t}/... with Need.SUBMIT
TENANT_SUBMIT = table(platform_viewer=DENIED, tenant_viewer=(403, 404))
#: /v1/tenants/{t}/... with Need.ADMIN
TENANT_ADMIN = table(platform_viewer=DENIED, tenant_user=(403, 404), tenant_viewer=(403, 404))
#: a job of the tenant-user: another tenant-user of the same tenant does not see it
JOB_READ = table(tenant_user_other=(404, 404))
JOB_CANCEL = table(platform_viewer=DENIED, tenant_user_other=(404, 404), tenant_viewer=(403, 404))
#: writes to the tenant object itself: a provider route (tenant roles cannot tell whether a
#: tenant they are not a member of exists: 403 either way)
TENANT_ITSELF_WRITE = PLATFORM_WRITE
#: a tenant list: everyone authenticated gets 200, members see only their tenants
TENANT_LIST = ANY_AUTH
#: /v1/users/{u}: a user may read itself ("own"), not another user ("foreign")
USER_SELF_READ = table(tenant_admin=(OK, 403), tenant_user=(OK, 403), tenant_viewer=(OK, 403))
#: DELETE /v1/tokens/{id}: the caller's own token ("own"), another user's ("foreign")
TOKEN_DELETE = table(
    platform_viewer=(OK, 404), tenant_admin=(OK, 404), tenant_user=(OK, 404),
    tenant_viewer=(OK, 404),
)  # fmt: skip

#: accepting an invitation: the invited user or a provider-admin only (a tenant's own members
#: are refused with 403, others see no such tenant)
INVITATION_ACCEPT = table(
    platform_viewer=DENIED, tenant_admin=(403, 404), tenant_user=(403, 404),
    tenant_viewer=(403, 404),
)  # fmt: skip


@dataclass(frozen=True)
class Call:
    """What a case sends: the path's parameters in order, and optionally a JSON body."""

    params: tuple[str, ...] = ()
    body: Any = None


#: (world, role, scope, whether the case is expected to succeed) -> what to send
Prepare = Callable[[World, str, str, bool], Call]


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # parameters written as {}
    expected: Table
    ok: int = 200
    prepare: Prepare = lambda w, role, scope, ok: Call()
    own_jobs_only: bool = False  # a tenant-user must not see another user's job in the body

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"


# --------------------------------------------------------------------------------------------
# What each case sends. ``scope`` picks the caller's own tenant or the foreign one; an object
# a case is expected to change or delete is made for that case by the provider admin first.


def tenant(w: World, role: str, scope: str, ok: bool) -> Call:
    return Call((w.side(scope).tenant,))


def in_tenant(attr: str) -> Prepare:
    """The tenant and one of its world objects (``cq``, ``lq``, ``hp``, ``pc``)."""

    def prepare(w: World, role: str, scope: str, ok: bool) -> Call:
        side = w.side(scope)
        return Call((side.tenant, getattr(side, attr)))

    return prepare


def global_object(name: str) -> Prepare:
    return lambda w, role, scope, ok: Call((name,))


def tenant_object(attr: str) -> Prepare:
    """A tenant's object addressed through a provider route (``/v1/cluster-queues/{name}``)."""
    return lambda w, role, scope, ok: Call((getattr(w.side(scope), attr),))


def new(make: Callable[[World, Side], Any], under_tenant: bool = False) -> Prepare:
    """A body for a create route, built fresh for the case (unique names)."""

    def prepare(w: World, role: str, scope: str, ok: bool) -> Call:
        side = w.side(scope)
        return Call((side.tenant,) if under_tenant else (), make(w, side))

    return prepare


def patch_tenant(w: World, role: str, scope: str, ok: bool) -> Call:
    return Call((w.side(scope).tenant,), {"displayName": "renamed"})


def patch_user(w: World, role: str, scope: str, ok: bool) -> Call:
    return Call((w.side(scope).users["tenant-viewer"],), {"displayName": "renamed"})


def new_member(w: World, role: str, scope: str, ok: bool) -> Call:
    return Call((w.side(scope).tenant, w.fresh("new-member")), {"role": "viewer"})


def member_token(w: World, role: str, scope: str, ok: bool) -> Call:
    """A token for a member of no other tenant (made for the case)."""
    tenant_name, user = disposable_member(w, role, scope, ok).params
    return Call((tenant_name, user), {"name": w.fresh("minted")})


def partition(w: World, role: str, scope: str, ok: bool) -> Call:
    return Call(disposable_node(w, role, scope, ok).params, {"partitioning": "whole"})


def self_user(w: World, role: str, scope: str, ok: bool) -> Call:
    if scope == "foreign":
        return Call((w.foreign.users["tenant-user"],))
    names = {"provider-admin": "admin", "platform-viewer": "pviewer"}
    return Call((names.get(role) or w.own.users.get(role, w.own.users["tenant-user"]),))


def disposable_user(w: World, role: str, scope: str, ok: bool) -> Call:
    side = w.side(scope)
    if not ok:
        return Call((side.users["tenant-viewer"],))
    user = w.fresh("tmp-user")
    w.admin("PUT", f"/v1/tenants/{side.tenant}/members/{user}", json={"role": "viewer"})
    return Call((user,))


def disposable_member(w: World, role: str, scope: str, ok: bool) -> Call:
    side = w.side(scope)
    if not ok:
        return Call((side.tenant, side.users["tenant-viewer"]))
    user = w.fresh("tmp-member")
    w.admin("PUT", f"/v1/tenants/{side.tenant}/members/{user}", json={"role": "viewer"})
    return Call((side.tenant, user))


def disposable_tenant(w: World, role: str, scope: str, ok: bool) -> Call:
    """A new tenant for a delete that must succeed; a refused one targets the world's."""
    if not ok:
        return Call((w.side(scope).tenant,))
    name = w.fresh("tmp-tenant")
    w.admin("POST", "/v1/tenants", json=tenant_body(name))
    return Call((name,))


def disposable_token(w: World, role: str, scope: str, ok: bool) -> Call:
    """A token of the caller ("own") or of a foreign tenant-user ("foreign")."""
    if not ok:
        return Call((str(w.side(scope).token_ids["tenant-user"]),))
    owner = w.token_of(role) if scope == "own" and role != "anonymous" else None
    owner = owner or w.side(scope).tokens["tenant-user"]
    body = expect(w.call(owner, "POST", "/v1/tokens", json={"name": w.fresh("tok")}), 201)
    return Call((str(body["id"]),))


def invitation(w: World, role: str, scope: str, ok: bool) -> Call:
    """The tenant's standing invitation for a refused case, a fresh one for a case that accepts
    or withdraws it."""
    side = w.side(scope)
    if not ok:
        return Call((side.tenant, f"{side.tenant}-invitee"))
    user = w.fresh("invitee")
    w.invite(side, user)
    return Call((side.tenant, user))


def tenant_token(w: World, role: str, scope: str, ok: bool) -> Call:
    """A token minted in the tenant: the world's tenant-user's for a refused case, a fresh one
    (for the tenant's viewer) for a case that revokes it."""
    side = w.side(scope)
    if not ok:
        return Call((side.tenant, str(side.token_ids["tenant-user"])))
    user = side.users["tenant-viewer"]
    body = w.admin("POST", f"/v1/tenants/{side.tenant}/members/{user}/tokens", json={"name": "t"})
    return Call((side.tenant, str(body["id"])))


def user_token(w: World, role: str, scope: str, ok: bool) -> Call:
    return Call((w.side(scope).users["tenant-viewer"],), {"name": w.fresh("personal")})


def disposable_node(w: World, role: str, scope: str, ok: bool) -> Call:
    if not ok:
        return Call(("node-1",))
    name = w.fresh("tmp-node")
    w.admin("POST", "/v1/nodes", json=node_entry(name))
    return Call((name,))


def disposable_global(
    collection: str, make: Callable[[str], dict[str, Any]], existing: Callable[[World, str], str]
) -> Prepare:
    """A fresh flavor / cohort / cluster queue ... that the case PUTs or DELETEs; a case that
    must be refused acts on the ``existing`` world object instead."""

    def prepare(w: World, role: str, scope: str, ok: bool) -> Call:
        if not ok:
            name = existing(w, scope)
            return Call((name,), make(name))
        body = make(w.fresh(f"tmp-{collection.strip('/').split('/')[-1]}"))
        w.admin("POST", collection, json=body)
        return Call((body["name"],), body)

    return prepare


def disposable_in_tenant(
    collection: str, attr: str, make: Callable[[str, Side], dict[str, Any]]
) -> Prepare:
    """A fresh object under ``/v1/tenants/{t}/<collection>`` that the case PUTs or DELETEs; a
    case that must be refused acts on the world's object ``attr`` instead."""

    def prepare(w: World, role: str, scope: str, ok: bool) -> Call:
        side = w.side(scope)
        if not ok:
            name = getattr(side, attr)
            return Call((side.tenant, name), make(name, side))
        body = make(w.fresh(f"tmp-{collection}"), side)
        w.admin("POST", f"/v1/tenants/{side.tenant}/{collection}", json=body)
        return Call((side.tenant, body["name"]), body)

    return prepare


def new_cluster(w: World, role: str, scope: str, ok: bool) -> Call:
    """A cluster to create, with a free node for it when the case is to succeed."""
    side = w.side(scope)
    if ok:
        w.admin("POST", "/v1/nodes", json=node_entry(w.fresh("cl-node")))
    return Call((side.tenant,), cluster_body(w.fresh("cl")))


def disposable_cluster(body: Any = None) -> Prepare:
    """A fresh cluster of the tenant that the case scales or deletes; a refused case acts on
    the world's."""

    def prepare(w: World, role: str, scope: str, ok: bool) -> Call:
        side = w.side(scope)
        if not ok:
            return Call((side.tenant, side.cluster), body)
        name = w.fresh("tmp-cl")
        w.admin("POST", "/v1/nodes", json=node_entry(w.fresh("cl-node")))
        w.create_cluster(side.tenant, name)
        return Call((side.tenant, name), body)

    return prepare


def owned_job(w: World, role: str, scope: str, ok: bool) -> Call:
    side = w.side(scope)
    return Call((side.tenant, str(side.jobs["tenant-user"])))


def disposable_job(w: World, role: str, scope: str, ok: bool) -> Call:
    """A fresh pending job of the tenant-user, for a case that cancels it."""
    if not ok:
        return owned_job(w, role, scope, ok)
    side = w.side(scope)
    job = expect(
        w.call(
            side.tokens["tenant-user"],
            "POST",
            f"/v1/tenants/{side.tenant}/jobs",
            json=job_spec(w.fresh("tmp-job"), side.lq),
        ),
        201,
    )
    return Call((side.tenant, str(job["id"])))


def kueue_import(w: World, role: str, scope: str, ok: bool) -> Call:
    doc = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": w.fresh("imported")},
        "spec": {},
    }
    return Call(body=[doc])


def queue_import(api_version: str) -> Prepare:
    """A KAI or Volcano queue without quota (so no flavor is needed): one new ClusterQueue."""

    def prepare(w: World, role: str, scope: str, ok: bool) -> Call:
        name = w.fresh("q-imported")
        return Call(body=[{"apiVersion": api_version, "kind": "Queue", "metadata": {"name": name}}])

    return prepare


def _flavor(name: str) -> dict[str, Any]:
    return {"name": name, "spec": {}}


def _cq_owned(name: str, side: Side) -> dict[str, Any]:
    return cluster_queue(name)


def _lq(name: str, side: Side) -> dict[str, Any]:
    return local_queue(name, side.cq)


def _only_pool(w: World, fresh: bool = True) -> str:
    """The idle pool (at most one exists): the ones there removed, a fresh one registered
    (``fresh``), its name; the name of a pool to create otherwise."""
    for item in w.admin("GET", "/v1/idle-pools")["items"]:
        expect(w.call(ADMIN_TOKEN, "DELETE", f"/v1/idle-pools/{item['name']}"), 204)
    name = w.fresh("pool")
    if fresh:
        w.admin("POST", "/v1/idle-pools", json={"name": name, "tenant": w.fresh("mp")})
    return name


def pool_call(verb: str) -> Prepare:
    """A pool for a case: created fresh for the allowed roles (refused ones never reach it)."""

    def prepare(w: World, role: str, scope: str, ok: bool) -> Call:
        if verb == "create":
            name = _only_pool(w, fresh=False) if ok else "none"
            return Call((), {"name": name, "tenant": w.fresh("mp")})
        name = _only_pool(w) if ok else "none"
        body = {"name": name, "tenant": "none", "graceSeconds": 45}
        if ok and verb == "update":
            body["tenant"] = w.admin("GET", f"/v1/idle-pools/{name}")["tenant"]
        return Call(() if verb == "list" else (name,), body if verb == "update" else None)

    return prepare


# --------------------------------------------------------------------------------------------
# The matrix: one entry per route of the API.

FLAVOR_TMP = disposable_global("/v1/flavors", _flavor, lambda w, scope: "gpu")
COHORT_TMP = disposable_global("/v1/cohorts", _flavor, lambda w, scope: "shared")
CQ_TMP = disposable_global("/v1/cluster-queues", cluster_queue, lambda w, scope: w.side(scope).cq)
PC_TMP = disposable_global(
    "/v1/priority-classes", lambda n: priority_class(n, 3), lambda w, scope: "global-high"
)
HP_TMP = disposable_global(
    "/v1/hardware-profiles", lambda n: hardware_profile(n, "main"), lambda w, scope: "shared-hp"
)
TENANT_CQ_TMP = disposable_in_tenant("cluster-queues", "cq", _cq_owned)
TENANT_COHORT_TMP = disposable_in_tenant(
    "cohorts", "cohort", lambda n, s: tenant_cohort(n, s.tenant)
)
TENANT_LQ_TMP = disposable_in_tenant("local-queues", "lq", _lq)
TENANT_PC_TMP = disposable_in_tenant("priority-classes", "pc", lambda n, s: priority_class(n, 4))
TENANT_DS_TMP = disposable_in_tenant("datasets", "ds", dataset)
TENANT_BUDGET_TMP = disposable_in_tenant("budgets", "budget", budget)
NEW_TENANT_BUDGET = new(lambda w, s: budget(w.fresh("b")), under_tenant=True)
NEW_TENANT_DS = new(lambda w, s: dataset(w.fresh("ds")), under_tenant=True)
PRICE_TMP = disposable_global("/v1/prices", price, lambda w, scope: "world-price")
NEW_PRICE = new(lambda w, s: price(w.fresh("price")))
TENANT_PRICE_TMP = disposable_in_tenant("prices", "price", price)
NEW_TENANT_PRICE = new(lambda w, s: price(w.fresh("price")), under_tenant=True)
TENANT_HP_TMP = disposable_in_tenant(
    "hardware-profiles", "hp", lambda n, s: hardware_profile(n, s.lq)
)
TENANT_VOL_TMP = disposable_in_tenant("volumes", "vol", lambda n, s: volume(n))
NEW_TENANT = new(lambda w, s: tenant_body(w.fresh("t")))
NEW_USER = new(lambda w, s: {"name": w.fresh("u")})
NEW_TOKEN = new(lambda w, s: {"name": w.fresh("tok")})
NEW_NODE = new(lambda w, s: node_entry(w.fresh("n")))
NEW_FLAVOR = new(lambda w, s: _flavor(w.fresh("f")))
NEW_COHORT = new(lambda w, s: _flavor(w.fresh("co")))
NEW_CQ = new(lambda w, s: cluster_queue(w.fresh("cq")))
NEW_PC = new(lambda w, s: priority_class(w.fresh("pc"), 5))
NEW_HP = new(lambda w, s: hardware_profile(w.fresh("hp"), "main"))
NEW_TENANT_CQ = new(lambda w, s: cluster_queue(w.fresh("cq")), under_tenant=True)
NEW_TENANT_COHORT = new(lambda w, s: tenant_cohort(w.fresh("co"), s.cohort), under_tenant=True)
NEW_TENANT_LQ = new(lambda w, s: local_queue(w.fresh("lq"), s.cq), under_tenant=True)
NEW_TENANT_PC = new(lambda w, s: priority_class(w.fresh("pc"), 7), under_tenant=True)
NEW_TENANT_HP = new(lambda w, s: hardware_profile(w.fresh("hp"), s.lq), under_tenant=True)
NEW_TENANT_VOL = new(lambda w, s: volume(w.fresh("vol")), under_tenant=True)
NEW_JOB = new(lambda w, s: job_spec(w.fresh("j"), s.lq), under_tenant=True)
NEW_JOBS = new(lambda w, s: {"jobs": [job_spec(w.fresh("j"), s.lq)]}, under_tenant=True)

T = "/v1/tenants/{}"
ROUTES: list[Route] = [
    # health and metrics: no authentication
    Route("GET", "/healthz", PUBLIC),
    Route("GET", "/metrics", PUBLIC),
    # identity
    Route("GET", "/v1/whoami", ANY_AUTH),
    Route("GET", "/v1/tenants", TENANT_LIST),
    Route("POST", "/v1/tenants", PLATFORM_WRITE, 201, NEW_TENANT),
    Route("GET", T, TENANT_READ, prepare=tenant),
    Route("PATCH", T, TENANT_ITSELF_WRITE, prepare=patch_tenant),
    Route("DELETE", T, TENANT_ITSELF_WRITE, 204, disposable_tenant),
    Route("GET", "/v1/users", PLATFORM_READ),
    Route("POST", "/v1/users", PLATFORM_WRITE, 201, NEW_USER),
    Route("GET", "/v1/users/{}", USER_SELF_READ, prepare=self_user),
    Route("PATCH", "/v1/users/{}", PLATFORM_WRITE, prepare=patch_user),
    Route("DELETE", "/v1/users/{}", PLATFORM_WRITE, 204, disposable_user),
    Route("GET", T + "/members", TENANT_READ, prepare=tenant),
    Route("PUT", T + "/members/{}", TENANT_ADMIN, prepare=new_member),
    Route("DELETE", T + "/members/{}", TENANT_ADMIN, 204, disposable_member),
    Route("POST", T + "/members/{}/tokens", TENANT_ADMIN, 201, member_token),
    Route("GET", "/v1/tokens", ANY_AUTH),
    Route("POST", "/v1/tokens", ANY_AUTH, 201, NEW_TOKEN),
    Route("DELETE", "/v1/tokens/{}", TOKEN_DELETE, 204, disposable_token),
    Route("GET", "/v1/users/{}/tokens", USER_SELF_READ, prepare=self_user),
    Route("POST", "/v1/users/{}/tokens", PLATFORM_WRITE, 201, user_token),
    Route("GET", T + "/tokens", TENANT_ADMIN, prepare=tenant),
    # the audit log: the provider's whole log, a tenant-admin's own tenant's entries
    Route("GET", "/v1/audit", PLATFORM_READ),
    Route("GET", T + "/audit", TENANT_ADMIN, prepare=tenant),
    Route("DELETE", T + "/tokens/{}", TENANT_ADMIN, 204, tenant_token),
    Route("GET", "/v1/invitations", ANY_AUTH),
    Route("GET", T + "/invitations", TENANT_READ, prepare=tenant),
    Route("DELETE", T + "/invitations/{}", TENANT_ADMIN, 204, invitation),
    Route("POST", T + "/invitations/{}/accept", INVITATION_ACCEPT, prepare=invitation),
    # fleet
    Route("GET", "/v1/network/manifests", PLATFORM_READ),
    Route("GET", "/v1/nodes", PLATFORM_READ),
    Route("POST", "/v1/nodes", PLATFORM_WRITE, 201, NEW_NODE),
    Route("PUT", "/v1/nodes", PLATFORM_WRITE, 200, NEW_NODE),
    Route("GET", "/v1/nodes/{}", PLATFORM_READ, prepare=global_object("node-1")),
    Route("DELETE", "/v1/nodes/{}", PLATFORM_WRITE, 204, disposable_node),
    Route("POST", "/v1/nodes/{}/cordon", PLATFORM_WRITE, prepare=disposable_node),
    Route("POST", "/v1/nodes/{}/uncordon", PLATFORM_WRITE, prepare=disposable_node),
    Route("POST", "/v1/nodes/{}/drain", PLATFORM_WRITE, prepare=disposable_node),
    Route("PUT", "/v1/nodes/{}/partition", PLATFORM_WRITE, prepare=partition),
    Route("GET", "/v1/nodes/{}/utilization", PLATFORM_READ, prepare=global_object("node-1")),
    Route("GET", "/v1/fleet/picture", PLATFORM_READ),
    Route("GET", "/v1/fleet/history", PLATFORM_READ),
    Route("GET", "/v1/fleet/idle", PLATFORM_READ),
    Route("GET", "/v1/fleet/tenants", PLATFORM_READ),
    # governance: the provider's objects
    Route("GET", "/v1/flavors", ANY_AUTH),
    Route("POST", "/v1/flavors", PLATFORM_WRITE, 201, NEW_FLAVOR),
    Route("GET", "/v1/flavors/{}", ANY_AUTH, prepare=global_object("gpu")),
    Route("PUT", "/v1/flavors/{}", PLATFORM_WRITE, prepare=FLAVOR_TMP),
    Route("DELETE", "/v1/flavors/{}", PLATFORM_WRITE, 204, FLAVOR_TMP),
    Route("GET", "/v1/cohorts", ANY_AUTH),
    Route("POST", "/v1/cohorts", PLATFORM_WRITE, 201, NEW_COHORT),
    Route("GET", "/v1/cohorts/{}", ANY_AUTH, prepare=global_object("shared")),
    Route("PUT", "/v1/cohorts/{}", PLATFORM_WRITE, prepare=COHORT_TMP),
    Route("DELETE", "/v1/cohorts/{}", PLATFORM_WRITE, 204, COHORT_TMP),
    Route("GET", "/v1/cluster-queues", PLATFORM_READ),
    Route("POST", "/v1/cluster-queues", PLATFORM_WRITE, 201, NEW_CQ),
    Route("GET", "/v1/cluster-queues/{}", PLATFORM_READ, prepare=tenant_object("cq")),
    Route("PUT", "/v1/cluster-queues/{}", PLATFORM_WRITE, prepare=CQ_TMP),
    Route("DELETE", "/v1/cluster-queues/{}", PLATFORM_WRITE, 204, CQ_TMP),
    Route("GET", "/v1/priority-classes", ANY_AUTH),
    Route("POST", "/v1/priority-classes", PLATFORM_WRITE, 201, NEW_PC),
    Route("GET", "/v1/priority-classes/{}", ANY_AUTH, prepare=global_object("global-high")),
    Route("PUT", "/v1/priority-classes/{}", PLATFORM_WRITE, prepare=PC_TMP),
    Route("DELETE", "/v1/priority-classes/{}", PLATFORM_WRITE, 204, PC_TMP),
    Route("GET", "/v1/hardware-profiles", PLATFORM_READ),
    Route("POST", "/v1/hardware-profiles", PLATFORM_WRITE, 201, NEW_HP),
    Route("GET", "/v1/hardware-profiles/{}", PLATFORM_READ, prepare=tenant_object("hp")),
    Route("PUT", "/v1/hardware-profiles/{}", PLATFORM_WRITE, prepare=HP_TMP),
    Route("DELETE", "/v1/hardware-profiles/{}", PLATFORM_WRITE, 204, HP_TMP),
    Route("POST", "/v1/kueue/import", PLATFORM_WRITE, prepare=kueue_import),
    Route("GET", "/v1/kueue/export", PLATFORM_READ),
    Route("POST", "/v1/kai/import", PLATFORM_WRITE, prepare=queue_import("scheduling.run.ai/v2")),
    Route("GET", "/v1/kai/export", PLATFORM_READ),
    Route(
        "POST",
        "/v1/volcano/import",
        PLATFORM_WRITE,
        prepare=queue_import("scheduling.volcano.sh/v1beta1"),
    ),
    Route("GET", "/v1/volcano/export", PLATFORM_READ),
    # governance: a tenant's own objects
    Route("GET", T + "/cluster-queues", TENANT_READ, prepare=tenant),
    Route("POST", T + "/cluster-queues", TENANT_ADMIN, 201, NEW_TENANT_CQ),
    Route("GET", T + "/cluster-queues/{}", TENANT_READ, prepare=in_tenant("cq")),
    Route("PUT", T + "/cluster-queues/{}", TENANT_ADMIN, prepare=TENANT_CQ_TMP),
    Route("DELETE", T + "/cluster-queues/{}", TENANT_ADMIN, 204, TENANT_CQ_TMP),
    Route("GET", T + "/cohorts", TENANT_READ, prepare=tenant),
    Route("POST", T + "/cohorts", TENANT_ADMIN, 201, NEW_TENANT_COHORT),
    Route("GET", T + "/cohorts/{}", TENANT_READ, prepare=in_tenant("cohort")),
    Route("PUT", T + "/cohorts/{}", TENANT_ADMIN, prepare=TENANT_COHORT_TMP),
    Route("DELETE", T + "/cohorts/{}", TENANT_ADMIN, 204, TENANT_COHORT_TMP),
    Route("GET", T + "/local-queues", TENANT_READ, prepare=tenant),
    Route("POST", T + "/local-queues", TENANT_ADMIN, 201, NEW_TENANT_LQ),
    Route("GET", T + "/local-queues/{}", TENANT_READ, prepare=in_tenant("lq")),
    Route("PUT", T + "/local-queues/{}", TENANT_ADMIN, prepare=TENANT_LQ_TMP),
    Route("DELETE", T + "/local-queues/{}", TENANT_ADMIN, 204, TENANT_LQ_TMP),
    Route("GET", T + "/priority-classes", TENANT_READ, prepare=tenant),
    Route("POST", T + "/priority-classes", TENANT_ADMIN, 201, NEW_TENANT_PC),
    Route("GET", T + "/priority-classes/{}", TENANT_READ, prepare=in_tenant("pc")),
    Route("PUT", T + "/priority-classes/{}", TENANT_ADMIN, prepare=TENANT_PC_TMP),
    Route("DELETE", T + "/priority-classes/{}", TENANT_ADMIN, 204, TENANT_PC_TMP),
    Route("GET", T + "/hardware-profiles", TENANT_READ, prepare=tenant),
    Route("POST", T + "/hardware-profiles", TENANT_ADMIN, 201, NEW_TENANT_HP),
    Route("GET", T + "/hardware-profiles/{}", TENANT_READ, prepare=in_tenant("hp")),
    Route("PUT", T + "/hardware-profiles/{}", TENANT_ADMIN, prepare=TENANT_HP_TMP),
    Route("DELETE", T + "/hardware-profiles/{}", TENANT_ADMIN, 204, TENANT_HP_TMP),
    Route("GET", T + "/volumes", TENANT_READ, prepare=tenant),
    Route("POST", T + "/volumes", TENANT_ADMIN, 201, NEW_TENANT_VOL),
    Route("GET", T + "/volumes/{}", TENANT_READ, prepare=in_tenant("vol")),
    Route("PUT", T + "/volumes/{}", TENANT_ADMIN, prepare=TENANT_VOL_TMP),
    Route("DELETE", T + "/volumes/{}", TENANT_ADMIN, 204, TENANT_VOL_TMP),
    # datasets: a tenant's own objects
    Route("GET", T + "/datasets", TENANT_READ, prepare=tenant),
    Route("POST", T + "/datasets", TENANT_ADMIN, 201, NEW_TENANT_DS),
    Route("GET", T + "/datasets/{}", TENANT_READ, prepare=in_tenant("ds")),
    Route("PUT", T + "/datasets/{}", TENANT_ADMIN, prepare=TENANT_DS_TMP),
    Route("DELETE", T + "/datasets/{}", TENANT_ADMIN, 204, TENANT_DS_TMP),
    Route("POST", T + "/datasets/{}/preload", TENANT_ADMIN, 202, preload_tmp),
    # invoices, showback, allocation; budgets (docs/billing.md)
    Route("GET", T + "/invoices", TENANT_READ, prepare=tenant),
    Route("GET", T + "/invoices/{}", TENANT_READ, prepare=past_month),
    Route("GET", T + "/invoices/{}/focus", TENANT_READ, prepare=past_month),
    Route("POST", T + "/invoices/{}/lines", PLATFORM_WRITE, 201, invoice_line),
    Route("POST", T + "/invoices/{}/close", PLATFORM_WRITE, prepare=close_month),
    Route("GET", T + "/showback", TENANT_READ, prepare=tenant),
    Route("GET", "/v1/allocation", PLATFORM_READ),
    Route("GET", T + "/budgets", TENANT_READ, prepare=tenant),
    Route("POST", T + "/budgets", TENANT_ADMIN, 201, NEW_TENANT_BUDGET),
    Route("GET", T + "/budgets/{}", TENANT_READ, prepare=in_tenant("budget")),
    Route("PUT", T + "/budgets/{}", TENANT_ADMIN, prepare=TENANT_BUDGET_TMP),
    Route("DELETE", T + "/budgets/{}", TENANT_ADMIN, 204, TENANT_BUDGET_TMP),
    # the price book: the provider's (read by anyone), a tenant's chargeback book
    Route("GET", "/v1/prices", ANY_AUTH),
    Route("POST", "/v1/prices", PLATFORM_WRITE, 201, NEW_PRICE),
    Route("GET", "/v1/prices/{}", ANY_AUTH, prepare=global_object("world-price")),
    Route("PUT", "/v1/prices/{}", PLATFORM_WRITE, prepare=PRICE_TMP),
    Route("DELETE", "/v1/prices/{}", PLATFORM_WRITE, 204, PRICE_TMP),
    Route("GET", T + "/prices", TENANT_READ, prepare=tenant),
    Route("POST", T + "/prices", TENANT_ADMIN, 201, NEW_TENANT_PRICE),
    Route("GET", T + "/prices/{}", TENANT_READ, prepare=in_tenant("price")),
    Route("PUT", T + "/prices/{}", TENANT_ADMIN, prepare=TENANT_PRICE_TMP),
    Route("DELETE", T + "/prices/{}", TENANT_ADMIN, 204, TENANT_PRICE_TMP),
    # usage: the provider's view, a tenant's (a tenant-user: its own), the idle pool's
    Route("GET", "/v1/usage", PLATFORM_READ),
    Route("GET", "/v1/usage/summary", PLATFORM_READ),
    Route("GET", T + "/usage", TENANT_READ, prepare=tenant),
    Route("GET", T + "/usage/summary", TENANT_READ, prepare=tenant),
    Route("GET", "/v1/idle-pool/usage", PLATFORM_READ),
    # jobs
    Route("POST", T + "/jobs", TENANT_SUBMIT, 201, NEW_JOB),
    Route("POST", T + "/jobs/batch", TENANT_SUBMIT, 201, NEW_JOBS),
    Route("GET", T + "/jobs", TENANT_READ, prepare=tenant, own_jobs_only=True),
    Route("GET", T + "/jobs/{}", JOB_READ, prepare=owned_job, own_jobs_only=True),
    Route("GET", T + "/jobs/{}/events", JOB_READ, prepare=owned_job, own_jobs_only=True),
    Route("GET", T + "/jobs/{}/logs", JOB_READ, prepare=owned_job, own_jobs_only=True),
    Route("GET", T + "/jobs/{}/manifest", JOB_READ, prepare=owned_job, own_jobs_only=True),
    Route("GET", T + "/jobs/{}/utilization", JOB_READ, prepare=owned_job, own_jobs_only=True),
    Route("POST", T + "/jobs/{}/cancel", JOB_CANCEL, prepare=disposable_job, own_jobs_only=True),
    Route("GET", T + "/workloads", TENANT_READ, prepare=tenant, own_jobs_only=True),
    Route("GET", "/v1/jobs", PLATFORM_READ),
    # tenant clusters
    Route("GET", T + "/clusters", TENANT_READ, prepare=tenant),
    Route("POST", T + "/clusters", TENANT_ADMIN, 202, new_cluster),
    Route("GET", T + "/clusters/{}", TENANT_READ, prepare=in_tenant("cluster")),
    Route("DELETE", T + "/clusters/{}", TENANT_ADMIN, 202, disposable_cluster()),
    Route(
        "POST",
        T + "/clusters/{}/scale",
        TENANT_ADMIN,
        202,
        disposable_cluster({"pools": [{"name": "p", "count": 0}]}),
    ),
    Route("GET", T + "/clusters/{}/events", TENANT_READ, prepare=in_tenant("cluster")),
    Route("GET", T + "/clusters/{}/manifest", TENANT_ADMIN, prepare=in_tenant("cluster")),
    Route("GET", T + "/clusters/{}/utilization", TENANT_READ, prepare=in_tenant("cluster")),
    Route("GET", "/v1/idle-pools", PLATFORM_READ, prepare=pool_call("list")),
    Route("POST", "/v1/idle-pools", PLATFORM_WRITE, 201, pool_call("create")),
    Route("GET", "/v1/idle-pools/{}", PLATFORM_READ, prepare=pool_call("get")),
    Route("PUT", "/v1/idle-pools/{}", PLATFORM_WRITE, prepare=pool_call("update")),
    Route("DELETE", "/v1/idle-pools/{}", PLATFORM_WRITE, 204, pool_call("delete")),
    Route("GET", T + "/cluster-allowance", TENANT_READ, prepare=tenant),
    Route(
        "PUT",
        T + "/cluster-allowance",
        PLATFORM_WRITE,
        prepare=lambda w, role, scope, ok: Call(
            (w.side(scope).tenant,), {"flavors": ["gpu"], "nodeLimit": 100}
        ),
    ),
]

#: Cases that fail today because of a bug in the service: (route key, role, scope) -> reason.
KNOWN_BUGS: dict[tuple[str, str, str], str] = {}


def _template(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def _settings(tmp: Path) -> Settings:
    return Settings(
        db_url=f"sqlite:///{tmp / 'gpuaas.db'}",
        data_dir=tmp,
        reconcile=False,
        admin_token=ADMIN_TOKEN,
    )


def _served_routes() -> tuple[set[str], set[str]]:
    """(routes in the OpenAPI document, every route the app answers), as "METHOD /path/{}"."""
    app = create_app(_settings(Path("/nonexistent")))
    documented = {
        f"{method.upper()} {_template(path)}"
        for path, item in app.openapi()["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    served = set(documented)
    for route in app.routes:
        for method in getattr(route, "methods", None) or ():
            if method != "HEAD":
                served.add(f"{method} {_template(getattr(route, 'path', ''))}")
    return documented, served


DOCUMENTED, SERVED = _served_routes()


def _cases() -> Iterator[Any]:
    for route, role, scope in itertools.product(ROUTES, ROLES, SCOPES):
        marks = []
        reason = KNOWN_BUGS.get((route.key, role, scope))
        if reason:
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        yield pytest.param(route, role, scope, marks=marks, id=f"{route.key}|{role}|{scope}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    app = create_app(_settings(tmp_path_factory.mktemp("rbac")))
    with TestClient(app, raise_server_exceptions=False) as client:
        w = World(client)
        w.build()
        yield w


def test_every_route_has_a_matrix_entry() -> None:
    """A new route must say who may call it before it ships."""
    missing = DOCUMENTED - {r.key for r in ROUTES}
    assert not missing, f"routes without an RBAC matrix entry: {sorted(missing)}"


def test_every_matrix_entry_is_served() -> None:
    absent = {r.key for r in ROUTES} - SERVED
    assert not absent, f"contract routes the app does not serve: {sorted(absent)}"


def test_matrix_has_no_duplicate_entries() -> None:
    keys = [r.key for r in ROUTES]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(("route", "role", "scope"), list(_cases()))
def test_rbac(world: World, route: Route, role: str, scope: str) -> None:
    """The exact status; a refusal is a problem document and writes nothing; a member of acme
    sees nothing of globex (and a tenant-user no other user's job)."""
    if route.key not in SERVED:
        pytest.skip(f"{route.key} is not served (test_every_matrix_entry_is_served fails)")
    want = route.expected[role][0 if scope == "own" else 1] or route.ok
    call = route.prepare(world, role, scope, want < 300)
    url = route.path.format(*(quote(p, safe="") for p in call.params))
    refused_write = route.method != "GET" and want >= 400
    before = world.snapshot() if refused_write else None
    response = world.call(world.token_of(role), route.method, url, json=call.body)
    assert response.status_code == want, (
        f"{route.key} as {role} ({scope}): expected {want}, got {response.status_code}: "
        f"{response.text[:300]}"
    )
    if want >= 400:
        assert response.headers["content-type"].startswith(PROBLEM), response.headers
        assert response.json()["status"] == want
    if before is not None:
        assert world.snapshot() == before, f"{route.key} as {role} was refused but wrote"
    if role in TENANT_ROLES and route.expected is not PUBLIC:
        assert_nothing_hidden_shows(world, route, role, url + json.dumps(call.body), response)


def assert_nothing_hidden_shows(
    world: World, route: Route, role: str, sent: str, response: httpx.Response
) -> None:
    """No name of the foreign tenant's objects (unless the request itself named it), and on job
    routes no foreign job id; a tenant-user also sees no other user's job."""
    names = list(world.foreign_markers())
    job_ids = list(world.foreign.jobs.values()) if route.own_jobs_only else []
    if route.own_jobs_only and role in ("tenant-user", "tenant-user-other"):
        others = [r for r in world.own.jobs if r != role]
        names += [world.own.job_name(r) for r in others]
        job_ids += [world.own.jobs[r] for r in others]
    text = response.text
    leaked = [name for name in names if name in text and name not in sent]
    leaked += [f"job {i}" for i in job_ids if re.search(rf'"id":{i}[,}}]', text)]
    assert not leaked, f"{route.key} as {role} shows {leaked}: {text[:300]}"


def test_a_job_is_looked_up_within_its_tenant(world: World) -> None:
    """Another tenant's job id under one's own tenant is 404, even for the provider admin."""
    foreign_job = world.foreign.jobs["tenant-user"]
    for role in ("provider-admin", "platform-viewer", "tenant-admin", "tenant-user"):
        for suffix in ("", "/events", "/logs", "/manifest", "/utilization"):
            url = f"/v1/tenants/{OWN}/jobs/{foreign_job}{suffix}"
            response = world.call(world.token_of(role), "GET", url)
            assert response.status_code == 404, (role, url, response.text)
            assert FOREIGN not in response.text
        url = f"/v1/tenants/{OWN}/jobs/{foreign_job}/cancel"
        response = world.call(world.token_of(role), "POST", url)
        refused = 403 if role == "platform-viewer" else 404  # a viewer may not cancel at all
        assert response.status_code == refused, (role, url, response.text)
    job = expect(world.call(ADMIN_TOKEN, "GET", f"/v1/tenants/{FOREIGN}/jobs/{foreign_job}"), 200)
    assert job["state"] == "Pending"


def test_a_tenant_admin_cannot_mint_tokens_for_a_foreign_user(world: World) -> None:
    user = world.foreign.users["tenant-user"]
    response = world.call(
        world.own.tokens["tenant-admin"],
        "POST",
        f"/v1/tenants/{OWN}/members/{user}/tokens",
        json={"name": "stolen"},
    )
    assert response.status_code == 404, response.text


#: A foreign object addressed under one's own tenant: (method, path under /v1/tenants/acme, body)
FOREIGN_UNDER_OWN: list[tuple[str, str, Any]] = [
    ("GET", "/cluster-queues/globex-cq", None),
    ("PUT", "/cluster-queues/globex-cq", cluster_queue("globex-cq")),
    ("DELETE", "/cluster-queues/globex-cq", None),
    ("GET", "/local-queues/globex-lq", None),
    ("PUT", "/local-queues/globex-lq", local_queue("globex-lq", "acme-cq")),
    ("DELETE", "/local-queues/globex-lq", None),
    ("GET", "/priority-classes/globex-pc", None),
    ("PUT", "/priority-classes/globex-pc", priority_class("globex-pc", 1)),
    ("DELETE", "/priority-classes/globex-pc", None),
    ("GET", "/hardware-profiles/globex-hp", None),
    ("GET", "/hardware-profiles/globex-only-hp", None),
    ("PUT", "/hardware-profiles/globex-hp", hardware_profile("globex-hp", "acme-lq")),
    ("DELETE", "/hardware-profiles/globex-hp", None),
    ("GET", "/volumes/globex-vol", None),
    ("PUT", "/volumes/globex-vol", volume("globex-vol")),
    ("DELETE", "/volumes/globex-vol", None),
    ("DELETE", "/members/globex-tenant-user", None),
]


@pytest.mark.parametrize(
    ("method", "path", "body"), FOREIGN_UNDER_OWN, ids=[f"{m} {p}" for m, p, _ in FOREIGN_UNDER_OWN]
)
def test_a_foreign_object_under_ones_own_tenant_is_not_found(
    world: World, method: str, path: str, body: Any
) -> None:
    """The tenant-admin of acme addressing globex's objects through acme's routes: 404, and
    nothing about them in the answer."""
    response = world.call(
        world.own.tokens["tenant-admin"], method, f"/v1/tenants/{OWN}{path}", json=body
    )
    assert response.status_code == 404, response.text
    assert f"tenant {FOREIGN}" not in response.text and "allowedTenants" not in response.text
    _, collection, name = path.split("/")
    still = world.call(ADMIN_TOKEN, "GET", f"/v1/tenants/{FOREIGN}/{collection}?limit=1000")
    expect(still, 200)
    assert f'"{name}"' in still.text, f"{name} of {FOREIGN} is gone"


def test_a_shared_profile_does_not_name_other_tenants(world: World) -> None:
    for role in TENANT_ROLES:
        token = world.own.tokens[role]
        one = world.call(token, "GET", f"/v1/tenants/{OWN}/hardware-profiles/shared-hp")
        assert expect(one, 200)["name"] == "shared-hp"
        assert FOREIGN not in one.text, one.text


def test_a_local_queue_cannot_use_a_foreign_cluster_queue(world: World) -> None:
    response = world.call(
        world.own.tokens["tenant-admin"],
        "POST",
        f"/v1/tenants/{OWN}/local-queues",
        json=local_queue("sneaky", f"{FOREIGN}-cq"),
    )
    assert response.status_code == 404, response.text  # as a missing one
    assert [e["field"] for e in response.json()["errors"]] == ["clusterQueue"], response.text
    assert f"tenant {FOREIGN}" not in response.text, response.text


def test_global_catalogue_reads_show_no_tenant_objects(world: World) -> None:
    """Reads open to every caller list only the provider's objects."""
    token = world.own.tokens["tenant-user"]
    for url in ("/v1/priority-classes", "/v1/flavors", "/v1/cohorts"):
        body = expect(world.call(token, "GET", url, params={"limit": 1000}), 200)
        names = {item["name"] for item in body["items"]}
        assert not names & {world.own.pc, world.foreign.pc, world.own.cq, world.foreign.cq}
    for name in (world.foreign.pc, world.own.pc):
        assert world.call(token, "GET", f"/v1/priority-classes/{name}").status_code == 404


def test_a_bad_token_is_401_everywhere(world: World) -> None:
    """An unknown, malformed or revoked token is the same as none: 401 with a challenge."""
    revoked = expect(world.call(ADMIN_TOKEN, "POST", "/v1/tokens", json={"name": "gone"}), 201)
    expect(world.call(ADMIN_TOKEN, "DELETE", f"/v1/tokens/{revoked['id']}"), 204)
    headers = [
        {"Authorization": "Bearer gpa_not-a-real-token"},
        {"Authorization": f"Bearer {revoked['token']}"},
        {"Authorization": f"Basic {ADMIN_TOKEN}"},
        {"Authorization": "Bearer "},
        {"Authorization": ADMIN_TOKEN},
    ]
    for header in headers:
        for url in ("/v1/whoami", f"/v1/tenants/{OWN}/jobs", "/v1/nodes"):
            response = world.client.get(url, headers=header)
            assert response.status_code == 401, (header, url, response.text)
            assert response.headers["content-type"].startswith(PROBLEM)
            assert response.headers.get("www-authenticate") == "Bearer"


@dataclass(frozen=True)
class Refusal:
    """A request by a member of acme that must be refused without describing globex."""

    id: str
    role: str
    path: str  # under /v1/tenants/acme
    body: dict[str, Any]
    named: tuple[str, ...] = ()  # foreign names the request itself used (may be echoed)
    bug: str | None = None


def _profile_job(profile: str) -> dict[str, Any]:
    return {"name": "probe", "command": ["x"], "podSets": [{"hardwareProfile": profile}]}


REFUSALS = [
    Refusal(
        "job-unknown-profile",
        "tenant-user",
        "/jobs",
        _profile_job("nope"),
    ),
    Refusal(
        "job-profile-not-allowed",
        "tenant-user",
        "/jobs",
        _profile_job(f"{FOREIGN}-only-hp"),
        named=(f"{FOREIGN}-only-hp",),
    ),
    Refusal(
        "job-foreign-profile",
        "tenant-user",
        "/jobs",
        _profile_job(f"{FOREIGN}-hp"),
        named=(f"{FOREIGN}-hp",),
    ),
    Refusal(
        "job-foreign-queue",
        "tenant-user",
        "/jobs",
        job_spec("probe", f"{FOREIGN}-lq"),
        named=(f"{FOREIGN}-lq",),
    ),
    Refusal(
        "job-foreign-priority",
        "tenant-user",
        "/jobs",
        {**job_spec("probe", f"{OWN}-lq"), "priorityClass": f"{FOREIGN}-pc"},
        named=(f"{FOREIGN}-pc",),
    ),
    Refusal(
        "local-queue-foreign-cluster-queue",
        "tenant-admin",
        "/local-queues",
        local_queue("probe", f"{FOREIGN}-cq"),
        named=(f"{FOREIGN}-cq",),
    ),
    Refusal(
        "local-queue-unknown-cluster-queue",
        "tenant-admin",
        "/local-queues",
        local_queue("probe", "nope"),
    ),
    Refusal(
        "profile-unknown-local-queue",
        "tenant-admin",
        "/hardware-profiles",
        hardware_profile("probe", "nope"),
    ),
    Refusal(
        "profile-for-another-tenant",
        "tenant-admin",
        "/hardware-profiles",
        hardware_profile("probe", f"{OWN}-lq", [FOREIGN]),
    ),
]


def _refusal_param(r: Refusal) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=r.bug)] if r.bug else []
    return pytest.param(r, id=r.id, marks=marks)


@pytest.mark.parametrize("refusal", [_refusal_param(r) for r in REFUSALS])
def test_a_refusal_describes_nothing_foreign(world: World, refusal: Refusal) -> None:
    """Error messages that list what exists ("known: ...") or who may use something list only
    what the caller may see."""
    before = world.snapshot()
    response = world.call(
        world.own.tokens[refusal.role],
        "POST",
        f"/v1/tenants/{OWN}{refusal.path}",
        json=refusal.body,
    )
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    text = response.text
    for name in refusal.named:
        text = text.replace(name, "")
    leaked = [name for name in world.foreign_markers() if name in text]
    assert not leaked, f"{refusal.id} shows {leaked}: {response.text}"
    assert world.snapshot() == before


@pytest.mark.parametrize("user", ["admin", "pviewer", f"{FOREIGN}-tenant-user"])
def test_a_tenant_admin_only_invites_an_existing_user(world: World, user: str) -> None:
    """A tenant-admin adding a user that exists already (a provider-admin, a platform viewer,
    another tenant's member) makes an invitation, not a member: no token can be minted for it,
    and nothing but the invitation is written."""
    admin_token = world.own.tokens["tenant-admin"]
    member = f"/v1/tenants/{OWN}/members/{user}"
    before = world.snapshot()
    invited = expect(world.call(admin_token, "PUT", member, json={"role": "tenant-admin"}), 202)
    try:
        assert invited["status"] == "invited"
        after = world.snapshot()
        changed = {t for t in after if after[t] != before[t]}
        assert changed == {"invitations"}, changed
        response = world.call(admin_token, "POST", member + "/tokens", json={"name": "escalate"})
        assert response.status_code == 404, response.text
        assert "token" not in response.json()
        gone = world.call(admin_token, "DELETE", member)
        assert gone.status_code == 404, gone.text
    finally:
        expect(world.call(admin_token, "DELETE", f"/v1/tenants/{OWN}/invitations/{user}"), 204)
    assert world.snapshot() == before


def test_filters_do_not_widen_what_a_tenant_user_sees(world: World) -> None:
    """?user= names another user: a tenant-user still sees only its own jobs."""
    token = world.own.tokens["tenant-user"]
    other = world.own.users["tenant-user-other"]
    for url in (f"/v1/tenants/{OWN}/jobs", f"/v1/tenants/{OWN}/workloads"):
        body = expect(world.call(token, "GET", url, params={"user": other}), 200)
        assert all(item["user"] != other for item in body["items"]), body
    body = expect(world.call(token, "GET", f"/v1/tenants/{OWN}/jobs"), 200)
    assert {item["name"] for item in body["items"]} >= {world.own.job_name("tenant-user")}


def test_a_removed_member_or_disabled_user_loses_access_at_once(world: World) -> None:
    """Removing a membership or disabling a user takes effect on the next request (tokens are
    checked against the database at every request)."""
    admin_token = world.own.tokens["tenant-admin"]
    for how in ("remove", "disable"):
        user = world.fresh("leaver")
        member = f"/v1/tenants/{OWN}/members/{user}"
        expect(world.call(admin_token, "PUT", member, json={"role": "tenant-user"}), 200)
        minted = expect(
            world.call(admin_token, "POST", member + "/tokens", json={"name": "t"}), 201
        )
        token = minted["token"]
        expect(world.call(token, "GET", f"/v1/tenants/{OWN}/jobs"), 200)
        if how == "remove":
            expect(world.call(admin_token, "DELETE", member), 204)
            gone = world.call(token, "GET", f"/v1/tenants/{OWN}/jobs")
            assert gone.status_code == 401, gone.text  # its tokens there are revoked
        else:
            world.admin("PATCH", f"/v1/users/{user}", json={"disabled": True})
            gone = world.call(token, "GET", f"/v1/tenants/{OWN}/jobs")
            assert gone.status_code == 401, gone.text
