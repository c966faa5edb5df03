"""A name ends where the text ends: a pattern checked with ``re.match`` and ``$`` took a name
with a final newline (``$`` also matches before one), so ``"acme\\n"`` was a valid tenant.
Every name checker refuses it now (``fullmatch``, or ``\\Z`` where a pattern is searched), as
the document's patterns (ECMA regular expressions, where ``$`` is the end) already did."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conftest import Api
from gpuaas.billing.periods import month
from gpuaas.model.errors import InvalidValue
from gpuaas.service.governance import name_problem
from gpuaas.service.models.identity import user_name_problem
from gpuaas.service.models.jobs import JobSpec
from gpuaas.supply.loaders._common import (
    label_key_problem,
    label_value_problem,
    node_name_problem,
)
from gpuaas.supply.nics import pool_problem


def _refuses(check: Callable[[str], object], text: str) -> bool:
    """Whether ``check`` refuses ``text``: returns a problem (not None), or raises."""
    try:
        return check(text) is not None
    except (ValueError, InvalidValue):
        return True


def _job_name(name: str) -> None:
    JobSpec.model_validate(
        {"name": name, "command": ["true"], "podSets": [{"resources": {"cpu": 1}}]}
    )


CHECKERS: list[tuple[str, Callable[[str], object], str]] = [
    ("dns-label", lambda n: name_problem(n, label=True), "acme"),
    ("dns-subdomain", name_problem, "gpu.example"),
    ("user", user_name_problem, "alice@example"),
    ("node", node_name_problem, "node-1"),
    ("label-key", label_key_problem, "example.com/zone"),
    ("label-value", label_value_problem, "eu-west"),
    ("nic-pool", pool_problem, "nvidia.com/rdma_shared"),
    ("job-name", _job_name, "train"),
    ("month", lambda t: month(t) and None, "2026-01"),
]


@pytest.mark.parametrize(("check", "name"), [(c, n) for _, c, n in CHECKERS],
                         ids=[i for i, _, _ in CHECKERS])  # fmt: skip
def test_a_name_with_a_final_newline_is_refused(check: Callable[[str], object], name: str) -> None:
    assert not _refuses(check, name)
    assert _refuses(check, name + "\n")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/tenants", {"name": "acme\n"}, "name"),
        ("/v1/idle-pools", {"name": "pool\n"}, "name"),
        ("/v1/idle-pools", {"tenant": "idle\n"}, "tenant"),
    ],
)
def test_the_api_refuses_a_name_with_a_final_newline(
    sqlite_api: Api, path: str, body: dict[str, str], field: str
) -> None:
    r = sqlite_api.post(path, json=body)
    assert r.status_code == 422, r.text
    assert field in [e["field"] for e in r.json()["errors"]]


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"nodeLabels": {"bad key!": "x"}}, "spec.nodeLabels.bad key!.[key]", "is not a label key"),
        ({"nodeLabels": {"zone": "eu west"}}, "spec.nodeLabels.zone", "is not a label value"),
        ({"nodeLabels": {"zone\n": "eu"}}, "spec.nodeLabels.zone\n.[key]", "is not a label key"),
        (
            {"nodeTaints": [{"key": "-x", "effect": "NoSchedule"}]},
            "spec.nodeTaints.0.key",
            "is not a label key",
        ),
    ],
)
def test_a_label_is_refused_in_words_not_as_a_pattern(
    sqlite_api: Api, spec: dict[str, object], field: str, words: str
) -> None:
    r = sqlite_api.post("/v1/flavors", json={"name": "f1", "spec": spec})
    assert r.status_code == 422, r.text
    (error,) = r.json()["errors"]
    assert error["field"] == field
    assert words in error["message"] and "^" not in error["message"], error
