"""MIG placement: the partitioner agrees with NVIDIA's tables, enumerated independently here."""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.model.devices import MigInstance
from gpuaas.supply.catalogue import lookup
from gpuaas.supply.mig import (
    PartitionError,
    check_layout,
    layout_counts,
    parse_layout,
    plan_layout,
    profile_table,
    valid_full_layouts,
)

SHARED = (
    Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "mig" / "mig_profiles.json"
)
# Catalogue model -> geometry key in the shared file.
MIG_MODELS = {
    "A100-40GB": "A100-40GB",
    "A100-80GB": "A100-80GB",
    "H100-80GB": "H100-80GB",
    "H200-141GB": "H200-141GB",
    "B200-180GB": "B200-180GB",
}


@pytest.fixture(scope="module")
def shared_table() -> dict:
    if not SHARED.exists():
        pytest.skip(f"shared MIG data not found at {SHARED} (../shared/data is absent)")
    return json.loads(SHARED.read_text())


def _independent_full_layouts(profiles: list[dict]) -> set[frozenset[tuple[str, int]]]:
    """Maximal valid placements, by brute force over memory-slice bitmasks (not the package's code).

    Rules from the table: starts from placement_starts, size placement_size, no memory overlap,
    compute slices <= 7, at most max_instances per profile, at most one +me instance.
    """
    options = [
        (
            p["name"],
            s,
            p["placement_size"],
            p["compute_slices"],
            p["max_instances"],
            "+me" in p["name"],
        )
        for p in profiles
        for s in p["placement_starts"]
    ]
    results: set[frozenset[tuple[str, int]]] = set()

    def can_add(state: tuple[int, int, Counter, int], option: tuple) -> bool:
        mask, compute, counts, media = state
        name, start, size, slices, limit, me = option
        bits = ((1 << size) - 1) << start
        return (
            start + size <= 8
            and not mask & bits
            and compute + slices <= 7
            and counts[name] < limit
            and not (me and media)
        )

    def grow(chosen: frozenset, state: tuple[int, int, Counter, int], seen: set) -> None:
        if chosen in seen:
            return
        seen.add(chosen)
        extended = False
        for option in options:
            if (option[0], option[1]) in chosen or not can_add(state, option):
                continue
            extended = True
            name, start, size, slices, _, me = option
            counts = Counter(state[2])
            counts[name] += 1
            grow(
                chosen | {(name, start)},
                (state[0] | ((1 << size) - 1) << start, state[1] + slices, counts, state[3] + me),
                seen,
            )
        if not extended and chosen:
            results.add(chosen)

    grow(frozenset(), (0, 0, Counter(), 0), set())
    return results


def test_package_data_keeps_the_shared_facts(shared_table: dict) -> None:
    ours = profile_table()
    for key, info in shared_table["gpus"].items():
        assert key in ours, key
        theirs = {p["name"]: p for p in info["profiles"]}
        assert set(theirs) == {p.name for p in ours[key]}
        for profile in ours[key]:
            raw = theirs[profile.name]
            assert profile.compute_slices == raw["compute_slices"]
            assert profile.memory_slices == raw["memory_slices"]
            assert profile.max_instances == raw["max_instances"]
            assert list(profile.placement_starts) == raw["placement_starts"]
            assert profile.placement_size == raw["placement_size"]
            assert profile.media_extensions == raw["media_extensions"]
            assert profile.memory_mib == raw["memory_mib_mock"]


@pytest.mark.parametrize("model", sorted(MIG_MODELS))
def test_every_full_layout_of_the_tables_is_found(model: str, shared_table: dict) -> None:
    profiles = shared_table["gpus"][MIG_MODELS[model]]["profiles"]
    expected = _independent_full_layouts(profiles)
    assert len(expected) > 50  # the table has hundreds of maximal mixes
    ours = {frozenset((i.profile, i.start) for i in layout) for layout in valid_full_layouts(model)}
    assert ours == expected
    for layout in expected:
        counts = Counter(name for name, _ in layout)
        placed = plan_layout(model, dict(counts))
        assert layout_counts(placed) == dict(counts)
        check_layout(model, placed)


@functools.cache
def _full_layouts(model: str) -> list[tuple[MigInstance, ...]]:
    return valid_full_layouts(model)


def _no_overlap(instances: tuple[MigInstance, ...]) -> bool:
    used: set[int] = set()
    for instance in instances:
        slices = set(instance.memory_slices)
        if used & slices:
            return False
        used |= slices
    return True


@st.composite
def wanted_layouts(draw: st.DrawFn) -> tuple[str, dict[str, int]]:
    model = draw(st.sampled_from(sorted(MIG_MODELS)))
    profiles = lookup(model).mig_profiles
    counts = {p.name: draw(st.integers(0, p.max_instances + 1)) for p in profiles}
    return model, {k: v for k, v in counts.items() if v}


@settings(max_examples=300, deadline=None)
@given(wanted_layouts())
def test_accepted_layouts_are_valid_and_rejections_are_right(
    case: tuple[str, dict[str, int]],
) -> None:
    model, wanted = case
    try:
        placed = plan_layout(model, wanted)
    except PartitionError as error:
        assert str(error)
        # Rejected: then no maximal layout contains this multiset of profiles.
        need = Counter(wanted)
        for layout in _full_layouts(model):
            have = Counter(i.profile for i in layout)
            assert not all(have[p] >= n for p, n in need.items()), (wanted, layout)
        return
    assert layout_counts(placed) == wanted
    assert check_layout(model, placed) == placed
    assert _no_overlap(placed)
    profiles = {p.name: p for p in lookup(model).mig_profiles}
    for instance in placed:
        assert instance.start in profiles[instance.profile].placement_starts
    assert sum(i.compute_slices for i in placed) <= 7


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(MIG_MODELS)),
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 7)), max_size=6),
)
def test_check_layout_rejects_overlaps(model: str, picks: list[tuple[int, int]]) -> None:
    profiles = lookup(model).mig_profiles
    instances = [
        profiles[p].instance(profiles[p].placement_starts[s % len(profiles[p].placement_starts)])
        for p, s in picks
    ]
    try:
        checked = check_layout(model, instances)
    except PartitionError:
        return
    assert _no_overlap(checked)


def test_named_configs_follow_mig_parted() -> None:
    assert parse_layout("all-1g.10gb", "A100-80GB") == {"1g.10gb": 7}
    assert parse_layout("all-1g.10gb", "A100-40GB") == {"1g.10gb": 4}  # the 2-slice 1g there
    assert parse_layout("all-1g.10gb.me", "H100") == {"1g.10gb+me": 1}
    assert parse_layout("all-balanced", "A100-40GB") == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert parse_layout("all-balanced", "H200") == {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
    assert parse_layout("all-disabled", "A100") == {}
    assert parse_layout("all-enabled", "A100") == {}
    assert parse_layout("ALL-7G.80GB", "H100") == {"7g.80gb": 1}


def test_layout_text_and_mapping_agree() -> None:
    mapping = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    assert parse_layout("3g.40gb,2g.20gb,2x1g.10gb", "A100-80GB") == mapping
    assert parse_layout("3g.40gb, 2g.20gb, 1g.10gb:2", "A100-80GB") == mapping
    assert parse_layout(mapping, "A100-80GB") == mapping
    placed = plan_layout("A100-80GB", mapping)
    assert layout_counts(placed) == mapping


@pytest.mark.parametrize(
    ("model", "wanted", "message"),
    [
        ("A100-40GB", {"5g.20gb": 1}, "unknown profile 5g.20gb for A100-40GB; valid: 1g.5gb"),
        ("H100", "4g.40gb,2x2g.20gb", "compute slices: layout needs 8 of 7"),
        ("H100", {"3g.40gb": 2, "1g.10gb": 1}, "memory slices: layout needs 9 of 8"),
        ("A100-80GB", {"1g.10gb": 8}, "1g.10gb: 8 instances, at most 7"),
        ("A100-80GB", {"2g.20gb": 4}, "2g.20gb: 4 instances, at most 3"),
        ("T4", "all-1g.10gb", "T4 does not support MIG"),
        ("G2", {"1g.10gb": 1}, "G2 does not support MIG"),
        ("A100-80GB", "3g.40gb,,1g.10gb", "cannot read MIG layout item"),
        ("A100-80GB", {"1g.10gb": -1}, "count must be a whole number"),
        ("A100-80GB", {"1g.10gb": True}, "count must be a whole number"),
    ],
)
def test_bad_layouts_say_why(model: str, wanted: object, message: str) -> None:
    with pytest.raises(PartitionError, match=message.replace("+", r"\+")):
        plan_layout(model, wanted)  # type: ignore[arg-type]


def test_conflict_names_the_slices() -> None:
    held = [MigInstance(4, 2, "2g.20gb", 2), MigInstance(0, 1, "1g.10gb", 1)]
    with pytest.raises(PartitionError) as caught:
        plan_layout("A100-80GB", {"3g.40gb": 1}, existing=held)
    text = str(caught.value)
    assert "3g.40gb needs memory slices 4-7 but 2g.20gb already holds 4-5" in text
    assert "3g.40gb needs memory slices 0-3 but 1g.10gb already holds 0" in text


def test_existing_instances_stay_put() -> None:
    held = [MigInstance(0, 4, "3g.40gb", 3)]
    placed = plan_layout("H100", {"2g.20gb": 1, "1g.20gb": 1}, existing=held)
    assert [(i.profile, i.start) for i in placed] == [
        ("3g.40gb", 0),
        ("2g.20gb", 4),
        ("1g.20gb", 6),
    ]
    with pytest.raises(PartitionError, match=r"2g.20gb needs memory slices 4-5 but 2g.20gb"):
        plan_layout("H100", {"2g.20gb": 2}, existing=held)


def test_check_layout_reasons() -> None:
    with pytest.raises(PartitionError, match=r"3g.40gb needs memory slices 4-7 but 2g.20gb"):
        check_layout(
            "A100-80GB", [MigInstance(4, 2, "2g.20gb", 2), MigInstance(4, 4, "3g.40gb", 3)]
        )
    with pytest.raises(PartitionError, match=r"1g.10gb cannot start at memory slice 7"):
        check_layout("A100-80GB", [MigInstance(7, 1, "1g.10gb", 1)])
    with pytest.raises(PartitionError, match=r"2g.20gb cannot start at memory slice 6"):
        check_layout("H100", [MigInstance(6, 2, "2g.20gb", 2)])
    with pytest.raises(PartitionError, match=r"1g.10gb\+me: 2 instances, at most 1 fit"):
        check_layout(
            "H100", [MigInstance(0, 1, "1g.10gb+me", 1), MigInstance(1, 1, "1g.10gb+me", 1)]
        )


def test_r510_rule_4g_with_3g_is_valid() -> None:
    placed = plan_layout("A100-80GB", {"4g.40gb": 1, "3g.40gb": 1})
    assert [(i.profile, i.start) for i in placed] == [("4g.40gb", 0), ("3g.40gb", 4)]
