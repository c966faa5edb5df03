"""Request and response bodies of tenants, users, memberships and tokens (camelCase JSON)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel

from gpuaas.service.governance import name_problem
from gpuaas.service.models.common import (
    DNS_LABEL_PATTERN,
    SUBDOMAIN_PATTERN,
    Strict,
    bytes_schema,
)
from gpuaas.service.models.quantities import Amounts, FlavorAmounts

#: Longest token lifetime a caller may ask for: ten years, in seconds.
MAX_TOKEN_LIFETIME = 10 * 365 * 24 * 3600


def _printable(text: str) -> str:
    """Refuse control characters (a NUL byte cannot even be stored by PostgreSQL)."""
    if any(ord(c) < 32 and c not in "\t\n" for c in text):
        raise ValueError("must not contain control characters")
    return text


#: Free text a person reads (display names, token names, descriptions); the schema says which
#: characters (the pattern is documentation: ``_printable`` is what checks)
Text = Annotated[
    str,
    AfterValidator(_printable),
    Field(json_schema_extra={"pattern": "^[^\\x00-\\x08\\x0b-\\x1f]*$"}),
]


def _tenant_name(name: str) -> str:
    """A tenant's name is the Kubernetes namespace of its LocalQueues: a DNS-1123 label."""
    problem = name_problem(name, label=True)
    if problem:
        raise ValueError(problem)
    return name


TenantName = Annotated[
    str,
    AfterValidator(_tenant_name),
    Field(json_schema_extra={"pattern": DNS_LABEL_PATTERN, "minLength": 1, "maxLength": 63}),
]

_USER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9._@]*[a-z0-9])?$")


def user_name_problem(name: str) -> str | None:
    """Why ``name`` is not a user name (1-100 of ``a-z 0-9 - . _ @``), or None."""
    if len(name) > 100 or not _USER_NAME.fullmatch(name):
        return (
            f"{name!r} is not a valid user name (1-100 lowercase letters, digits, '-', '.', '_' "
            "or '@', starting and ending with a letter or digit)"
        )
    return None


def _user_name(name: str) -> str:
    problem = user_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


#: a user name as the document says it (``user_name_problem`` checks it, with its own message)
USER_NAME_SCHEMA = {"pattern": _USER_NAME.pattern, "minLength": 1, "maxLength": 100}
UserName = Annotated[str, AfterValidator(_user_name), Field(json_schema_extra=USER_NAME_SCHEMA)]

#: ``{flavor: {resource: quantity}}``, e.g. ``{"h100": {"nvidia.com/gpu": "64"}}``: each
#: amount as :mod:`gpuaas.service.models.quantities` says it for its resource
Capacity = FlavorAmounts


class CamelIn(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel)


class CamelOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel)


class TenantRole(CamelOut):
    tenant: str
    role: str


class WhoAmI(CamelOut):
    user: str
    platform_role: str | None
    tenants: list[TenantRole]


#: ``{resource: quantity}``, e.g. ``{"nvidia.com/gpu": 8}``.
Limits = Amounts
#: the provider Cohort a tenant's root hangs from: a DNS-1123 subdomain (``check_name``)
CohortName = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": SUBDOMAIN_PATTERN, "maxLength": 253})
]
#: the most bytes a tenant's volumes may hold together: a size in bytes, 0 (nothing) allowed
StorageQuota = Annotated[str | StrictInt, WithJsonSchema(bytes_schema(zero=True))]


class TenantIn(CamelIn):
    """A tenant and the provider's terms (:mod:`gpuaas.service.tenancy`): ``capacity`` is the
    grant its root cohort holds; ``parentCohort`` the provider Cohort that root hangs from;
    ``borrowing``/``lending`` its limits there; ``maxJob`` the most one job may ask for;
    ``priorityCeiling`` the highest value of the tenant's own priority classes;
    ``storageQuota`` the most bytes its volumes may hold together (a quantity, ``10Ti``)."""

    model_config = ConfigDict(
        json_schema_extra={  # tenants.set_terms: borrowing or lending needs a parentCohort
            "anyOf": [
                {"required": ["parentCohort"], "properties": {"parentCohort": {"type": "string"}}},
                {
                    "properties": {
                        "borrowing": {"maxProperties": 0},
                        "lending": {"maxProperties": 0},
                    }
                },
            ]
        }
    )

    name: TenantName
    display_name: Text = Field(default="", max_length=200)
    capacity: Capacity = Field(default_factory=dict)
    parent_cohort: CohortName | None = None
    borrowing: Capacity = Field(default_factory=dict)
    lending: Capacity = Field(default_factory=dict)
    max_job: Limits = Field(default_factory=dict)
    priority_ceiling: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    storage_quota: StorageQuota | None = None


class TenantPatch(CamelIn):
    """Fields left out stay as they are; ``parentCohort: null`` / ``priorityCeiling: null``
    / ``storageQuota: null`` remove them."""

    display_name: Text | None = Field(default=None, max_length=200)
    capacity: Capacity | None = None
    parent_cohort: CohortName | None = None
    borrowing: Capacity | None = None
    lending: Capacity | None = None
    max_job: Limits | None = None
    priority_ceiling: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    storage_quota: StorageQuota | None = None


class TenantOut(CamelOut):
    name: str
    display_name: str
    capacity: dict[str, dict[str, str]]
    cohort: str
    parent_cohort: str | None = None
    borrowing: dict[str, dict[str, str]] = Field(default_factory=dict)
    lending: dict[str, dict[str, str]] = Field(default_factory=dict)
    max_job: dict[str, str] = Field(default_factory=dict)
    priority_ceiling: int | None = None
    #: bytes; null: no limit
    storage_quota: int | None = None
    created_at: float


class UserIn(CamelIn):
    name: UserName
    display_name: Text = Field(default="", max_length=200)
    platform_role: str | None = Field(
        default=None, json_schema_extra={"enum": ["provider-admin", "viewer", None]}
    )


class UserPatch(CamelIn):
    """``platformRole: null`` removes the platform role; leave it out to keep it."""

    display_name: Text | None = Field(default=None, max_length=200)
    platform_role: str | None = Field(
        default=None, json_schema_extra={"enum": ["provider-admin", "viewer", None]}
    )
    disabled: StrictBool | None = None  # true or false: not 1, "yes"


class UserOut(CamelOut):
    name: str
    display_name: str
    platform_role: str | None
    disabled: bool
    created_at: float


class MemberIn(CamelIn):
    """``role``: one of ``auth.TENANT_ROLES`` (``members`` checks it, with its own message)."""

    role: str = Field(json_schema_extra={"enum": ["tenant-admin", "tenant-user", "viewer"]})


class MemberOut(CamelOut):
    """``status``: ``active`` (a member) or ``invited`` (the user exists already and has not yet
    accepted; it is no member until then)."""

    user: str
    role: str
    created_at: float
    status: str = "active"


class InvitationOut(CamelOut):
    tenant: str
    user: str
    role: str
    invited_by: str
    created_at: float


class TokenIn(CamelIn):
    """``expiresIn`` (seconds) may not reach past the expiry of the token that mints it; left
    out, the new token expires with it (or never, when it never does)."""

    name: Text = Field(min_length=1, max_length=100)
    expires_in: int | None = Field(default=None, ge=1, le=MAX_TOKEN_LIFETIME)


class TokenOut(CamelOut):
    """``tenant``: the tenant a token was minted in (it answers for that tenant only), or null
    for a personal token."""

    id: int
    name: str
    user: str
    tenant: str | None = None
    #: the first 8 hex digits of the token's SHA-256: tells tokens apart, reveals nothing
    fingerprint: str
    created_at: float
    expires_at: float | None


class TokenCreated(TokenOut):
    """Carries the secret: shown once, never stored (only its SHA-256 is kept)."""

    token: str
