"""Schemathesis hooks (``SCHEMATHESIS_HOOKS=schemathesis_hooks``) loaded by the fuzzer's own
process in ``test_schemathesis.py``: the fuzzer may not take away its own credential.

The fuzzing token belongs to a user the world made for it. Every operation that could revoke
that token or the role behind it (revoking the token by id, deleting or disabling the user,
dropping or changing its membership, deleting its tenant) still runs with whatever else was
generated, but a path parameter that names the fuzzer's own token, user or tenant is pointed at
one that does not exist. Everything else, including revoking the world's other tokens, is
fuzzed as generated. ``GPUAAS_FUZZ_GUARD`` (JSON) names what to protect:
``{"token_id": 7, "user": "acme-tenant-admin", "tenant": "acme"}``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis

GUARD: dict[str, Any] = json.loads(os.environ.get("GPUAAS_FUZZ_GUARD", "{}"))
NO_TOKEN = 987_654_321
NO_USER = "fuzz-nobody"
NO_TENANT = "fuzz-nowhere"

#: (method, path template) -> the path parameters that name a credential of the caller
GUARDED: dict[tuple[str, str], tuple[str, ...]] = {
    ("DELETE", "/v1/tokens/{token_id}"): ("token_id",),
    ("DELETE", "/v1/tenants/{tenant}/tokens/{token_id}"): ("token_id",),
    ("DELETE", "/v1/users/{user}"): ("user",),
    ("PATCH", "/v1/users/{user}"): ("user",),
    ("PUT", "/v1/tenants/{tenant}/members/{user}"): ("user",),
    ("DELETE", "/v1/tenants/{tenant}/members/{user}"): ("user",),
    ("DELETE", "/v1/tenants/{tenant}"): ("tenant",),
}


def _own(name: str, value: object) -> bool:
    if name == "token_id":
        return str(value) == str(GUARD.get("token_id"))
    return value is not None and str(value) == str(GUARD.get(name))


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    names = GUARDED.get((case.method.upper(), case.path))
    if not names or not case.path_parameters:
        return
    replacement = {"token_id": NO_TOKEN, "user": NO_USER, "tenant": NO_TENANT}
    for name in names:
        if _own(name, case.path_parameters.get(name)):
            case.path_parameters[name] = replacement[name]
