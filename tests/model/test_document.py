"""The strict-document reader every loader uses: errors name the field path and the problem."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.model import document
from gpuaas.model.errors import InvalidValue


def problem(call, *args, **kwargs) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidValue) as caught:
        call(*args, **kwargs)
    return str(caught.value)


def test_paths_join_keys_and_indices() -> None:
    assert document.at("nodes", 1) == "nodes[1]"
    assert document.at("nodes[1]", "gpus") == "nodes[1].gpus"
    assert document.at("", "kind") == "kind"


def test_mapping_names_what_it_found_and_the_first_unknown_key() -> None:
    assert document.mapping(None, "spec") == {}
    assert problem(document.mapping, None, "spec", optional=False) == (
        "spec: expected a mapping, got None"
    )
    assert problem(document.mapping, [1], "spec") == "spec: expected a mapping, got a list"
    assert problem(document.mapping, "x", "spec") == "spec: expected a mapping, got 'x'"
    found = problem(document.mapping, {"model": "L4", "cnt": 1}, "gpus", ("model", "count"))
    assert found == "gpus.cnt: unknown key 'cnt' (allowed: model, count)"
    kueue = problem(
        document.mapping, {"x": 1}, "spec", ("b", "a"), unknown="field {key!r} is not supported"
    )
    assert kueue == "spec.x: field 'x' is not supported (allowed: b, a)"
    assert "(allowed: a, b)" in problem(document.only, {"x": 1}, {"b", "a"}, "")


def test_sequence_text_integer_number_and_labels() -> None:
    assert document.sequence(None, "taints") == []
    assert problem(document.sequence, {}, "taints") == "taints: expected a list, got a mapping"
    assert document.text(" L4 ", "model") == "L4"
    assert document.text(4090, "model", numbers=True) == "4090"
    assert document.text(" a", "name", strip=False) == " a"
    assert problem(document.text, None, "name") == "name: is required (a non-empty string)"
    assert problem(document.text, "  ", "name") == "name: expected a non-empty string, got '  '"
    assert problem(document.text, 7, "name") == "name: expected a non-empty string, got 7"
    assert document.integer(3, "count", 1, 8) == 3
    assert problem(document.integer, 0, "count", 1, 8) == "count: must be a positive integer, got 0"
    assert problem(document.integer, 2.5, "n", 0) == "n: must be a non-negative integer, got 2.5"
    assert problem(document.integer, True, "n") == "n: must be an integer, got True"
    assert problem(document.integer, 9, "n", 1, 8) == "n: must be at most 8, got 9"
    assert document.number(2, "at") == 2.0
    assert problem(document.number, math.inf, "at", what="a number of seconds") == (
        "at: expected a number of seconds, got inf"
    )
    assert problem(document.number, -1, "at", minimum=0) == "at: must be at least 0, got -1"
    assert document.labels({"a": 1, "b": None}, "labels") == {"a": "1", "b": ""}
    assert problem(document.labels, {"k": ["x"]}, "labels") == (
        "labels.k: expected a string, got a list"
    )


@given(st.integers(-50, 50), st.integers(-50, 50), st.integers(-60, 60))
def test_integer_accepts_exactly_the_bounded_integers(low: int, high: int, value: int) -> None:
    inside = low <= value <= high
    try:
        assert document.integer(value, "n", low, high) == value
        assert inside
    except InvalidValue as exc:
        assert not inside and exc.field == "n"
