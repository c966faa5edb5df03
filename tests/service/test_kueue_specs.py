"""The OpenAPI document and the request models agree on the typed specs (models/kueue_specs.py)
and on the grammars the server matches first: what a pattern admits the server reads (a
quantity, a time, a SKU), and a spec the document calls valid or invalid the model does too."""

from __future__ import annotations

import tempfile
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from gpuaas.billing.skus import parse_sku
from gpuaas.model.resources import canonical_amount
from gpuaas.service.app import create_app
from gpuaas.service.models.billing import SKU_PATTERN, PriceIn
from gpuaas.service.models.common import BYTES_PATTERN, MAX_BYTES_TEXT, TIME_PATTERN
from gpuaas.service.models.kueue_specs import ClusterQueueSpec, CohortSpec, HardwareProfileSpec
from gpuaas.service.models.quantities import WHOLE_PATTERN
from gpuaas.service.prices import _when
from gpuaas.service.settings import Settings


@settings(max_examples=300, deadline=None)
@given(st.from_regex(WHOLE_PATTERN, fullmatch=True).filter(lambda t: len(t) <= MAX_BYTES_TEXT))
def test_a_whole_quantity_the_document_admits_is_a_whole_amount(text: str) -> None:
    assert 0 <= canonical_amount("nvidia.com/gpu", text) < 2**63


@settings(max_examples=300, deadline=None)
@given(st.from_regex(BYTES_PATTERN, fullmatch=True).filter(lambda t: len(t) <= MAX_BYTES_TEXT))
def test_any_quantity_the_document_admits_is_an_amount(text: str) -> None:
    assert 0 <= canonical_amount("memory", text) < 2**63
    assert canonical_amount("cpu", text) >= 0


@settings(max_examples=300, deadline=None)
@given(st.from_regex(TIME_PATTERN, fullmatch=True))
def test_a_time_the_document_admits_is_read(text: str) -> None:
    assert _when("validFrom", text) is not None


@settings(max_examples=300, deadline=None)
@given(st.from_regex(SKU_PATTERN, fullmatch=True).filter(lambda s: "\x00" not in s))
def test_a_sku_the_document_admits_is_one(text: str) -> None:
    sku = parse_sku(text)
    assert sku is not None and sku.id == text


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        settings_ = Settings(
            db_url=f"sqlite:///{tmp}/x.db", data_dir=tmp, reconcile=False, admin_token="t" * 32
        )
        return create_app(settings_).openapi()


def _agree(
    document: dict[str, Any], model: type[BaseModel], spec: Any, component: str = ""
) -> bool:
    """Whether the document's schema of ``model`` and the model both accept ``spec`` (or both
    refuse it); returns the verdict. The schema's ``$ref``s point into the document's
    components, carried along so the validator resolves them."""
    components = document["components"]
    schema = {**components["schemas"][component or model.__name__], "components": components}
    documented = jsonschema.Draft202012Validator(schema).is_valid(spec)
    try:
        model.model_validate(spec)
        served = True
    except ValidationError:
        served = False
    assert documented == served, (model.__name__, spec, documented, served)
    return served


def _queue(quota: Any, resource: str = "nvidia.com/gpu", **more: Any) -> dict[str, Any]:
    flavor = {"name": "gpu", "resources": [{"name": resource, "nominalQuota": quota, **more}]}
    return {"resourceGroups": [{"coveredResources": [resource], "flavors": [flavor]}]}


QUEUE_CASES: list[tuple[Any, bool]] = [
    ({}, True),
    (_queue(8), True),
    (_queue("8"), True),
    (_queue("2k"), True),
    (_queue(8.0), True),
    (_queue("1.5"), False),  # a GPU counts whole units
    (_queue(1.5), False),
    (_queue("500m", "cpu"), True),
    (_queue(0.5, "memory"), True),
    (_queue("-1"), False),
    (_queue(True), False),
    (_queue(9.2e18, "cpu"), True),
    (_queue(9.3e18, "cpu"), False),
    (_queue("lots"), False),
    (_queue(None), False),
    (_queue(1, borrowingLimit=2), False),  # a limit needs a cohort
    ({**_queue(1, borrowingLimit=2), "cohortName": "team"}, True),
    ({**_queue(1, borrowingLimit=2), "cohortName": ""}, False),
    ({"namespaceSelector": {}}, True),
    ({"namespaceSelector": {"matchLabels": {}}}, False),
    ({"stopPolicy": "None"}, True),
    ({"stopPolicy": "Hold"}, False),
    ({"queueingStrategy": "StrictFIFO"}, True),
    ({"queueingStrategy": None}, False),
    ({"flavorFungibility": {"preference": "BorrowingOverPreemption"}}, False),
    (
        {
            "flavorFungibility": {
                "whenCanBorrow": "TryNextFlavor",
                "preference": "BorrowingOverPreemption",
            }
        },
        True,
    ),
    ({"preemption": {"borrowWithinCohort": {"maxPriorityThreshold": 5}}}, False),
    (
        {
            "preemption": {
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 5}
            }
        },
        True,
    ),
    ({"cohortName": "Team A"}, False),
    ({"admissionChecks": []}, False),
    (
        {"resourceGroups": [{"coveredResources": ["cpu", "cpu"], "flavors": []}]},
        False,
    ),
]


@pytest.mark.parametrize(("spec", "valid"), QUEUE_CASES)
def test_cluster_queue_specs_document_and_server_agree(
    document: dict[str, Any], spec: Any, valid: bool
) -> None:
    assert _agree(document, ClusterQueueSpec, spec) is valid


@pytest.mark.parametrize(
    ("spec", "valid"),
    [
        ({"parentName": "root", **_queue(4)}, True),
        ({"parentName": ""}, True),
        ({"fairSharing": {"weight": "-1"}}, False),
        ({"fairSharing": {"weight": "1.5"}}, True),
        ({"cohortName": "x"}, False),  # a ClusterQueue's field
    ],
)
def test_cohort_specs_document_and_server_agree(
    document: dict[str, Any], spec: Any, valid: bool
) -> None:
    assert _agree(document, CohortSpec, spec) is valid


def _profile(**changes: Any) -> dict[str, Any]:
    resource = {"name": "nvidia.com/gpu", "min": 1, "default": 1, "max": "8"}
    spec = {"displayName": "One GPU", "localQueue": "main", "resources": [resource]}
    return {**spec, **changes}


@pytest.mark.parametrize(
    ("spec", "valid"),
    [
        (_profile(), True),
        ({k: v for k, v in _profile().items() if k != "displayName"}, False),
        (_profile(resources=[]), False),
        (_profile(resources=[{"name": "nvidia.com/gpu", "min": 1, "default": "0.5"}]), False),
        (_profile(resources=[{"name": "cpu", "min": "500m", "default": "1"}]), True),
        (_profile(allowedTenants=["acme", "acme"]), False),
        (_profile(allowedTenants=["Acme"]), False),
        (_profile(description=""), False),
        (_profile(localQueue="../../etc"), False),
    ],
)
def test_hardware_profile_specs_document_and_server_agree(
    document: dict[str, Any], spec: Any, valid: bool
) -> None:
    assert _agree(document, HardwareProfileSpec, spec) is valid


@pytest.mark.parametrize(
    ("changes", "valid"),
    [
        ({}, True),
        ({"sku": "H100"}, False),
        ({"sku": "cpu/cpu@reserved"}, True),
        ({"currency": "EUR"}, True),
        ({"currency": "XYZ"}, False),
        ({"validFrom": "2024-02-29T12:00:00Z"}, True),
        ({"validFrom": "2026-02-29"}, False),
        ({"validFrom": "1767225600.5"}, True),
        ({"validFrom": -1}, False),
    ],
)
def test_prices_document_and_server_agree(
    document: dict[str, Any], changes: dict[str, Any], valid: bool
) -> None:
    body = {"name": "p", "sku": "H100-80GB/whole@on-demand", "listPerHour": "2.49",
            "validFrom": 1_700_000_000, **changes}  # fmt: skip
    # the create route's body: the name required with the rule a price's name has
    assert _agree(document, PriceIn, body, "PriceInCreateLabel") is valid
