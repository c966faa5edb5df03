"""A pod set's ``resources``: the OpenAPI document (models/quantities.py) and the server agree.

Over random requests (names and amounts drawn from the document's own patterns, from near
misses and from anything), the document's schema of a pod set accepts exactly what the server
accepts before it looks at the store: pydantic's model, then :func:`pod_resources` and the GPU
form check. The validator is the one schemathesis uses (jsonschema_rs: ECMA regular
expressions, where ``$`` does not match before a final newline as Python's does).
"""

from __future__ import annotations

import re
import tempfile
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpuaas.engine.admission.gpu_size import gpu_milli, mig_compute_slices
from gpuaas.model.errors import InvalidValue
from gpuaas.model.resources import canonical_amount
from gpuaas.service.app import create_app
from gpuaas.service.jobs import _check_gpu_form
from gpuaas.service.models.common import BYTES_PATTERN, MAX_BYTES_TEXT
from gpuaas.service.models.governance import LABEL_KEY_PATTERN
from gpuaas.service.models.jobs import PodSetSpec
from gpuaas.service.models.quantities import (
    MAX_SHARE,
    MIG_NAME_PATTERN,
    SHARE_PATTERN,
    WHOLE_PATTERN,
    ZERO_PATTERN,
    pod_resources,
)
from gpuaas.service.settings import Settings

FIELD = "podSets[0].resources"


@pytest.fixture(scope="module")
def validator() -> Any:
    """The document's schema of a pod set, its ``$ref``s resolved in the document."""
    with tempfile.TemporaryDirectory() as tmp:
        settings_ = Settings(
            db_url=f"sqlite:///{tmp}/x.db", data_dir=tmp, reconcile=False, admin_token="t" * 32
        )
        document = create_app(settings_).openapi()
    components = document["components"]
    schema = {**components["schemas"]["PodSetSpec"], "components": components}
    return jsonschema_rs.validator_for(schema)


def _served(resources: Any) -> bool:
    """Whether the server takes a pod set asking for ``resources`` (before the store), leaving
    out the one rule the document does not say: not every amount zero (the operation's
    UNCHECKED reason in test_schemathesis.py; models/quantities.ASKS_FOR_SOMETHING says why)."""
    try:
        spec = PodSetSpec.model_validate({"name": "main", "resources": resources})
        requests = pod_resources(spec.resources or {}, FIELD)
        _check_gpu_form(requests, FIELD)
    except ValidationError:
        return False
    except InvalidValue as exc:
        return "asks for nothing" in exc.problem
    return True


def test_a_pod_set_asking_for_nothing_is_the_servers_to_refuse() -> None:
    with pytest.raises(InvalidValue, match="asks for nothing"):
        _check_gpu_form(pod_resources({"cpu": "0", "nvidia.com/gpu": 0}, FIELD), FIELD)


def _text(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True).filter(lambda t: len(t) <= MAX_BYTES_TEXT)


KNOWN = st.sampled_from(
    [
        "cpu",
        "memory",
        "ephemeral-storage",
        "nvidia.com/gpu",
        "gpuaas.io/gpu-milli",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/mig-1g.10gb.me",
        "nvidia.com/mig-9g.90gb",  # no GPU has nine compute slices
        "nvidia.com/mig-0g.5gb",
        "nvidia.com/mig-1g.",
        "nvidia.com/mig-",
        "nvidia.com/mig-x",
        "hugepages-2Mi",
        "example.com/rdma",
        "../../etc",
        "nvidia.com/gpu\n",
        "Nvidia.com/gpu",
        "",
    ]
)
#: mostly the names the server treats apart, some of any name or MIG name the document admits
NAMES = st.one_of(
    KNOWN,
    KNOWN,
    KNOWN,
    st.from_regex(LABEL_KEY_PATTERN, fullmatch=True).filter(lambda t: len(t) <= 253),
    st.from_regex(MIG_NAME_PATTERN, fullmatch=True),
)
AMOUNTS = st.one_of(
    _text(WHOLE_PATTERN),
    _text(BYTES_PATTERN),
    _text(SHARE_PATTERN),
    _text(ZERO_PATTERN),
    st.sampled_from(["0", "1", "1.5", "500m", "-1", "-0", "1e23", " 1", "1\n", "lots", "1Ki"]),
    st.sampled_from(["2k", "1.0", "999", "1000", "1500", "0.5k", "1e3", "", "9" * 65]),
    st.sampled_from([True, False, None, [1], {}]),
    st.integers(-5, 2**64),
    st.integers(0, 3000),
    st.sampled_from(
        [0, 1, 999, 1000, 1500, 2000, MAX_SHARE, MAX_SHARE + 1, 9_200_000_000_000_000_000]
    ),
    st.floats(min_value=-1, max_value=1e20, allow_nan=False),
    st.sampled_from([0.0, 0.5, 1.0, 2.0, 1e-300, 999.0, 1000.0, 9.2e18, 9.3e18]),
)


@settings(max_examples=1500, deadline=None)
@given(st.dictionaries(NAMES, AMOUNTS, max_size=4))
@example({})
@example({"cpu": 0})
@example({"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1})
@example({"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 1})
@example({"nvidia.com/gpu": 1, "gpuaas.io/gpu-milli": "0"})
@example({"gpuaas.io/gpu-milli": 500, "nvidia.com/mig-1g.10gb": "1"})
@example({"gpuaas.io/gpu-milli": 1500})
@example({"gpuaas.io/gpu-milli": 999})
@example({"gpuaas.io/gpu-milli": "999"})
@example({"gpuaas.io/gpu-milli": MAX_SHARE - 999})
@example({"gpuaas.io/gpu-milli": MAX_SHARE + 1})
@example({"gpuaas.io/gpu-milli": 2000.0})
@example({"gpuaas.io/gpu-milli": "2k"})
@example({"nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-3g.40gb": 2})
@example({"nvidia.com/gpu": True})
@example({"nvidia.com/gpu": "1\n"})
@example({"nvidia.com/gpu\n": 1})
@example({"cpu": 1e-300})
@example({"cpu": "1", f"{'a' * 189}/{'b' * 63}": 1})  # 253 characters
@example({"cpu": "1", f"{'a' * 190}/{'b' * 63}": 1})
def test_the_document_and_the_server_agree_on_a_pod_sets_resources(
    validator: Any, resources: dict[str, Any]
) -> None:
    documented = validator.is_valid({"name": "main", "resources": resources})
    assert documented == _served(resources), (resources, documented)


@settings(max_examples=300, deadline=None)
@given(_text(SHARE_PATTERN))
def test_a_share_the_document_admits_is_one_the_engine_places(text: str) -> None:
    milli = canonical_amount("gpuaas.io/gpu-milli", text)
    assert 0 <= milli <= MAX_SHARE and (milli < 1000 or milli % 1000 == 0)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(MIG_NAME_PATTERN, fullmatch=True))
def test_a_mig_name_the_document_admits_is_charged_by_its_size(name: str) -> None:
    assert 1 <= mig_compute_slices(name) <= 7
    assert gpu_milli({name: 1}) > 0


@settings(max_examples=300, deadline=None)
@given(st.one_of(_text(WHOLE_PATTERN), _text(BYTES_PATTERN)))
def test_a_text_is_zero_exactly_when_the_zero_pattern_says_so(text: str) -> None:
    said = re.fullmatch(ZERO_PATTERN, text) is not None
    for name in ("cpu", "memory"):
        assert (canonical_amount(name, text) == 0) == said, (name, text)


def test_an_error_names_the_resource_in_the_fields_format_of_today() -> None:
    with pytest.raises(InvalidValue) as caught:
        pod_resources({"cpu": "1", "nvidia.com/gpu": "1.5"}, FIELD)
    assert caught.value.field == "podSets[0].resources.nvidia.com/gpu"
    assert "whole units" in caught.value.problem
    with pytest.raises(InvalidValue) as caught:
        pod_resources({"nvidia.com/mig-9g.90gb": 1}, FIELD)
    assert caught.value.field == "podSets[0].resources.nvidia.com/mig-9g.90gb"
    assert "compute slices, 1 to 7" in caught.value.problem
    with pytest.raises(InvalidValue) as caught:
        pod_resources({"gpuaas.io/gpu-milli": 1500}, FIELD)
    assert "2000 or '2k'" in caught.value.problem
