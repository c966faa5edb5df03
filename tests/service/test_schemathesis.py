"""Schemathesis against the real server: every operation of the OpenAPI document, stateless
(examples, coverage, fuzzing) and stateful (sequences along the links schemathesis infers), as
each of the three roles (provider admin, tenant admin, tenant user), with every check on,
including status-code, content-type, header and response-schema conformance and
``positive_data_acceptance`` (see ACCEPTED and UNCHECKED below).

The app runs under uvicorn on a real port in this process (so keep-alive connections, request
parsing and error answers are the production ones); the fuzzer is schemathesis' own command
line in a subprocess. The world is the RBAC matrix's (two tenants with queues, profiles,
volumes, datasets, budgets, clusters and jobs), so there are real objects to read, change and
delete. Each role's token was made for it by the world, and the fuzzer cannot revoke it:
``schemathesis_hooks.py`` points any request that would revoke that exact token, or delete,
disable or demote its user or tenant, at an object that does not exist. The roles run one
after another on one server, the provider admin last (it may delete the tenants the others
need). Rate limits and the failed-authentication back-off are off here: they have tests of
their own (test_rate_limits.py), and the fuzzer's ``ignored_auth`` check would otherwise
bring the back-off onto its own later requests.

The seed is fixed and generation deterministic, so CI reproduces a failure; the example
counts are chosen so the file takes about two minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from serve_process import free_port
from test_rbac_matrix import ADMIN_TOKEN, OWN, World

from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings

pytest.importorskip("schemathesis")

HERE = Path(__file__).parent
#: the fixed seed CI runs; ``GPUAAS_FUZZ_SEED`` for another by hand (a document change moves what
#: a seed generates, so try a few before removing an operation from UNCHECKED)
SEED = int(os.environ.get("GPUAAS_FUZZ_SEED", "20261126"))
#: per operation and role: generated cases in the fuzzing phase, and scenarios in the stateful
#: one (``GPUAAS_FUZZ_EXAMPLES`` for a deeper run by hand)
MAX_EXAMPLES = int(os.environ.get("GPUAAS_FUZZ_EXAMPLES", "2"))
#: the provider admin, last, also runs the coverage phase (every operation's boundary values,
#: each parameter left out or of the wrong type, undeclared methods, missing Authorization):
#: thousands of cases, whose role-independent checks (405 and Allow, 401 without a token) need
#: no second and third run; the tenant roles run examples, fuzzing and stateful sequences
ROLES = {
    "tenant-user": "examples,fuzzing,stateful",
    "tenant-admin": "examples,fuzzing,stateful",
    "provider-admin": "examples,coverage,fuzzing,stateful",
}
#: Every check runs, ``positive_data_acceptance`` too: a request the document calls valid must
#: be accepted, or refused only with a status that says it is valid but names what does not
#: exist (404) or conflicts with what is stored (409); 401/403 are the role's, not the data's.
#: Never a 422: a rule the server keeps is in the document (patterns, enums, bounds, a name
#: required on create and read-only on replace, ``oneOf``/``anyOf``/``if``-``then``).
ACCEPTED = ["2xx", "401", "403", "404", "409"]
#: The operations whose valid-looking requests the server may still refuse with a 422 (their
#: own ``expected-statuses`` add 422; every other check still runs on them), each
#: with why: a rule JSON Schema cannot say (across fields, or against what is stored), written
#: in the operation's description and as an ``x-`` extension of its schema. Everything else is
#: checked with ACCEPTED alone.
UNCHECKED: dict[str, str] = {
    # rules across fields, or against what is stored, that JSON Schema cannot say
    "GET /v1/allocation": "a window of at most 93 days: end - start, across two parameters",
    **{
        f"GET {path}": ("a period or start/end, not both, and end after start: across parameters")
        for path in (
            "/v1/usage",
            "/v1/usage/summary",
            "/v1/tenants/{tenant}/usage",
            "/v1/tenants/{tenant}/usage/summary",
        )
    },
    "POST /v1/tenants/{tenant}/jobs": (
        "the LocalQueue, priority class, cluster, volumes and dataset named must be the "
        "tenant's, a pod set's hardwareProfile one available to it (whose resources, with the "
        "pod set's, keep to its bounds and one GPU form), its resources known and within what "
        "the queue's quota and some node could ever give (stored); pod set names unique and "
        "at most 10,000 pods in all, not every amount of a pod set's resources zero (across "
        "items; the last sayable as a `not`, which made generating a job twice as slow); an "
        "autoscaled job's maxReplicas at least its minReplicas (across fields). A pod set's "
        "resources themselves are typed per resource name (models/quantities.py)"
    ),
    "POST /v1/tenants/{tenant}/jobs/batch": (
        "a YAML/JSON text of job documents: the body is a string whose content JSON Schema "
        "cannot constrain"
    ),
    "POST /v1/kueue/import": "a YAML text of Kueue objects, validated together with the store",
    "POST /v1/kai/import": "a YAML text of KAI Queues, validated together with the store",
    "POST /v1/volcano/import": "a YAML text of Volcano Queues, validated together with the store",
    "POST /v1/nodes": "a YAML/JSON text of node documents, the body a string",
    "PUT /v1/nodes": "a YAML/JSON text of node documents, the body a string",
    # typed specs (models/kueue_specs.py) whose remaining rules are across fields or stored
    **{
        f"{method} {path}{one}": (
            "each flavor of a resource group lists the group's coveredResources in that "
            "order, a resource is covered by one group and a flavor listed once (across "
            "items); the flavors named must exist and a tenant's cohorts stay inside its tree "
            "and grant (stored)"
        )
        for path in ("/v1/cohorts", "/v1/tenants/{tenant}/cohorts")
        for method, one in (("POST", ""), ("PUT", "/{name}"))
    },
    **{
        f"{method} {path}{one}": (
            "each flavor of a resource group lists the group's coveredResources in that "
            "order, a resource is covered by one group and a flavor listed once (across "
            "items), lendingLimit at most nominalQuota (across fields); the flavors named must "
            "exist, a tenant's queues stay inside its tree and their quota within its grant "
            "(stored)"
        )
        for path in ("/v1/cluster-queues", "/v1/tenants/{tenant}/cluster-queues")
        for method, one in (("POST", ""), ("PUT", "/{name}"))
    },
    **{
        f"{method} {path}{one}": (
            "each resource's min <= default <= max and named once (across fields and items); "
            "the LocalQueue must exist in each allowed tenant's namespace (stored); a tenant's "
            "own profile serves that tenant only (allowedTenants against the path)"
        )
        for path in ("/v1/hardware-profiles", "/v1/tenants/{tenant}/hardware-profiles")
        for method, one in (("POST", ""), ("PUT", "/{name}"))
    },
    **{
        operation: (
            "validUntil after validFrom (across fields); an entry's validity may not overlap "
            "another entry of its SKU in the book (stored); a price given as a JSON number has "
            "at most 9 decimal places (JSON Schema's multipleOf cannot say it of a binary "
            "number; as text it is the document's pattern)"
        )
        for operation in (
            "POST /v1/prices",
            "PUT /v1/prices/{name}",
            "POST /v1/tenants/{tenant}/prices",
            "PUT /v1/tenants/{tenant}/prices/{name}",
        )
    },
    "POST /v1/tenants": (
        "parentCohort must be one of the provider's Cohorts (stored); borrowing and lending "
        "name flavors of the tenant's capacity (across fields: a key of one map among the "
        "keys of another)"
    ),
    "PATCH /v1/tenants/{tenant}": (
        "capacity not below the quota the tenant's own queues hold, parentCohort one of the "
        "provider's Cohorts, borrowing and lending only with a parentCohort and on flavors of "
        "the capacity, given or stored (stored, across fields)"
    ),
    "PUT /v1/nodes/{name}/partition": (
        "the partitioning (text or a mapping, the inventory file's grammar) must be one the "
        "node's GPU model can take: MIG profiles and layouts are per model (stored)"
    ),
    "POST /v1/tenants/{tenant}/clusters": (
        "a pool's flavor or GPU model must be one the tenant may draw from, its nodes within "
        "the tenant's node limit, its kind one this server provisions (stored, configured); "
        "pool names unique (across items); a pool's min <= max and an autoscaler's scaleInBelow "
        "under its target (across fields); tenant and cluster name within 63 characters "
        "(against the path)"
    ),
}


def config_file(directory: Path) -> Path:
    """The schemathesis configuration (TOML): the accepted statuses and the exceptions."""
    lines = [
        "[checks.positive_data_acceptance]",
        f"expected-statuses = {json.dumps(ACCEPTED)}",
    ]
    for operation in sorted(UNCHECKED):
        lines += [
            "",
            "[[operations]]",
            f"include-name = {json.dumps(operation)}",
            f"checks.positive_data_acceptance.expected-statuses = {json.dumps([*ACCEPTED, '422'])}",
        ]
    path = directory / "schemathesis.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


class _Client:
    """What ``World`` needs of a client (``request`` and ``app``), over a real socket."""

    def __init__(self, url: str, app: FastAPI) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)
        self.app = app

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, url, **kwargs)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(url, **kwargs)


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # a thread of pytest's, not a process
        pass


@contextmanager
def serve_world(tmp: Path) -> Iterator[tuple[str, World]]:
    """The app under uvicorn on a free port with the RBAC matrix's world built in it."""
    settings = Settings(
        db_url=f"sqlite:///{tmp / 'gpuaas.db'}",
        data_dir=tmp,
        reconcile=False,
        admin_token=ADMIN_TOKEN,
        rate_per_token=0,
        rate_per_tenant=0,
        auth_free_failures=0,
    )
    app = create_app(settings)
    port = free_port()
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    client = _Client(url, app)
    world = World(client)  # type: ignore[arg-type]
    try:
        world.build()
        yield url, world
    finally:
        client.http.close()
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, World]]:
    with serve_world(tmp_path_factory.mktemp("fuzz")) as served:
        yield served


def _credential(url: str, world: World, role: str) -> tuple[str, dict[str, Any]]:
    """The role's token and what of it the fuzzer may not revoke."""
    token = world.token_of(role)
    assert token is not None
    me = httpx.get(f"{url}/v1/whoami", headers={"Authorization": f"Bearer {token}"}).json()
    mine = httpx.get(f"{url}/v1/tokens", headers={"Authorization": f"Bearer {token}"}).json()
    items = mine["items"] if isinstance(mine, dict) else mine
    token_ids = [t["id"] for t in items]
    own = world.own.token_ids.get(role) if role != "provider-admin" else min(token_ids)
    guard = {"token_id": own, "user": me["user"], "tenant": OWN}
    return token, guard


def _fuzz(
    url: str, token: str, guard: dict[str, Any], phases: str, report: Path
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env["SCHEMATHESIS_HOOKS"] = "schemathesis_hooks"
    env["GPUAAS_FUZZ_GUARD"] = json.dumps(guard)
    env["NO_COLOR"] = "1"
    command = [
        str(Path(sys.executable).with_name("st")),
        "--config-file",
        str(config_file(report)),
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization: Bearer {token}",
        "--checks",
        "all",
        "--phases",
        phases,
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-database",
        "none",
        "--workers",
        "1",
        "--request-timeout",
        "30",
        # how fast data is generated is no property of the API: a job's body (its typed
        # resources, a 100,000-character script) takes ~50 ms a case, and on the shared loaded
        # machine ten such draws passed the 1 s the health check allows (the run has its timeout)
        "--suppress-health-check",
        "too_slow",
        "--no-color",
        "--output-truncate",
        "false",
        "--report",
        "junit",
        "--report-dir",
        str(report),
        "--wait-for-schema",
        "120",
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("role", ROLES)
def test_schemathesis_passes_every_check(
    served: tuple[str, World], role: str, tmp_path: Path
) -> None:
    url, world = served
    token, guard = _credential(url, world, role)
    started = time.monotonic()
    result = _fuzz(url, token, guard, ROLES[role], tmp_path)
    took = time.monotonic() - started
    output = f"{role} ({took:.0f}s):\n{result.stdout[-20000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, output
    # the fuzzer's credential survived its run
    me = httpx.get(f"{url}/v1/whoami", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200, me.text
