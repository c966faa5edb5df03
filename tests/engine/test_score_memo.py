"""The default policy's fast paths (score memo, plain-Python scoring of few states, memoised
refresh, hole waste) must return exactly what the vectorised computation returns: a last-bit
difference could break a tie the other way and change a placement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuaas.engine.policies.default as default
import gpuaas.engine.policies.score_memo as score_memo
from gpuaas.engine.framework import CycleState, PodShape
from gpuaas.engine.policies.base import FragModel, TaskMix
from gpuaas.engine.policies.default import MILLI, GpuaasPolicy, HoleModel
from gpuaas.engine.snapshot import Assignment, Snapshot
from gpuaas.model.devices import GPU, Partition
from gpuaas.model.node import Node
from gpuaas.model.workload import PodRequest

GI = 2**30

SHARES = [0, 100, 250, 300, 500, 650, 700, 950]
REQUESTS = [
    PodRequest(cpu_milli=c, memory_bytes=m * GI, gpus=g, gpu_milli=s)
    for c, m, g, s in [
        (8000, 64, 1, 0),
        (96000, 512, 8, 0),
        (2000, 16, 1, 300),
        (2000, 16, 1, 650),
        (4000, 8, 1, 250),
        (16000, 128, 0, 0),
        (1000, 4, 2, 0),
        (2000, 16, 1, 950),
    ]
]


def _fleet(specs: list[tuple[int, int, int, int]]) -> Snapshot:
    nodes = [
        Node(
            f"n{i:02d}",
            cpu,
            mem * GI,
            [GPU(g, f"n{i}-{g}", model, 81920, Partition.whole()) for g in range(gpus)],
        )
        for i, (gpus, cpu, mem, model) in enumerate(
            (gpus, cpu, mem, ("A", "B")[m]) for gpus, cpu, mem, m in specs
        )
    ]
    return Snapshot.from_nodes(nodes)


def _numpy_score(
    policy: GpuaasPolicy, state: CycleState, snap: Snapshot, nodes: np.ndarray
) -> np.ndarray:
    """``policy.score`` forced down the vectorised path (no state counts as few)."""
    few = default._FEW
    default._FEW = 0
    try:
        return policy.score(state, snap, nodes)
    finally:
        default._FEW = few


def _reference(mix: TaskMix) -> GpuaasPolicy:
    """The same policy on the ordinary fragmentation model, always scored with numpy."""
    policy = GpuaasPolicy(mix)
    policy.frag = FragModel(mix, with_memory=True)
    return policy


fleets = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 4, 8]),
        st.integers(8_000, 192_000),
        st.integers(32, 2048),
        st.integers(0, 1),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(
    specs=fleets,
    mix_pods=st.lists(st.sampled_from(range(len(REQUESTS))), min_size=1, max_size=12),
    steps=st.lists(
        st.tuples(st.sampled_from(range(len(REQUESTS))), st.integers(0, 2**16)),
        min_size=1,
        max_size=25,
    ),
)
def test_fast_score_equals_the_vectorised_score(
    specs: list[tuple[int, int, int, int]],
    mix_pods: list[int],
    steps: list[tuple[int, int]],
) -> None:
    """Place a stream of pods by the fast policy; before each, the fast score (memo or plain
    Python) and its GPU choice for a share equal, bit for bit, the numpy score of a policy on
    the ordinary fragmentation model."""
    snap = _fleet(specs)
    mix = TaskMix.from_pods([REQUESTS[i] for i in mix_pods])
    fast, slow = GpuaasPolicy(mix), _reference(mix)
    for pick, seed in steps:
        pod = REQUESTS[pick]
        shape = PodShape.of(pod)
        rng = np.random.default_rng(seed)
        nodes = np.flatnonzero(rng.random(snap.size) < 0.8)
        ok = (
            (snap.cpu_free[nodes] >= shape.cpu)
            & (snap.mem_free[nodes] >= shape.mem)
            & (snap.full_free[nodes] >= shape.whole)
            & (snap.max_free[nodes] >= shape.share)
        )
        nodes = nodes[ok]
        if len(nodes) == 0:
            continue
        state = CycleState(pod=pod, shape=shape)
        got = fast.score(state, snap, nodes)
        want_state = CycleState(pod=pod, shape=shape)
        want = _numpy_score(slow, want_state, snap, nodes)
        assert got.tobytes() == want.tobytes()
        if shape.share:
            assert np.array_equal(state.data["share_gpu"], want_state.data["share_gpu"])
        # the same decision again: every part now comes from the memo
        twice = CycleState(pod=pod, shape=shape)
        assert fast.score(twice, snap, nodes).tobytes() == want.tobytes()
        if shape.share:
            assert np.array_equal(twice.data["share_gpu"], want_state.data["share_gpu"])
        # place on the best node, as place_nodes does (lowest index among equal scores)
        best = int(np.flatnonzero(got == got.max())[0])
        state.data["pick"] = best
        snap.reserve(int(nodes[best]), fast.assign(state, snap, int(nodes[best])))
        # and after it: the memo for the unchanged states, fresh for the changed one
        again = CycleState(pod=pod, shape=shape)
        repeat = fast.score(again, snap, nodes)
        want = _numpy_score(slow, CycleState(pod=pod, shape=shape), snap, nodes)
        assert repeat.tobytes() == want.tobytes()


@settings(max_examples=40, deadline=None)
@given(
    specs=fleets,
    taken=st.lists(
        st.tuples(st.integers(0, 11), st.integers(0, 7), st.sampled_from([*SHARES[1:], 1000])),
        max_size=30,
    ),
    cpu=st.lists(st.integers(0, 8_000), min_size=12, max_size=12),
    every=st.integers(1, 4),
)
def test_memoised_refresh_equals_the_ordinary_refresh(
    specs: list[tuple[int, int, int, int]],
    taken: list[tuple[int, int, int]],
    cpu: list[int],
    every: int,
) -> None:
    """Refreshed after every ``every`` reservations (one or several stale nodes, states new
    or memoised), the fast model holds the same S, C, T, F and state ids as the ordinary
    one."""
    snap = _fleet(specs)
    mix = TaskMix.from_pods(REQUESTS)
    fast = score_memo.StateFragModel(mix)
    slow = FragModel(mix, with_memory=True)
    everything = np.arange(snap.size)
    fast.refresh(snap, everything)
    slow.refresh(snap, everything)
    for step, (n, g, milli) in enumerate(taken):
        n %= snap.size
        g %= int(snap.gpu_count[n])
        if snap.gpu_free[n, g] < milli or snap.cpu_free[n] < cpu[n]:
            continue
        snap.reserve(n, Assignment(n, cpu_milli=cpu[n], gpu_milli=((g, milli),)))
        if step % every:
            continue
        fast.refresh(snap, everything)
        slow.refresh(snap, everything)
        for name in ("S", "C", "T", "F", "key"):
            assert getattr(fast, name).tobytes() == getattr(slow, name).tobytes(), name


def _waste_reference(model: HoleModel, snap: Snapshot) -> np.ndarray:
    """The hole waste as first written: every sum rebuilt size by size for every hole."""
    got_p = (model.p * model.fill_chance(snap)).tolist()
    sizes = model.d.tolist()
    popularity = model.p.tolist()
    w = [0.0] * (MILLI + 1)
    for h in range(1, MILLI + 1):
        total = arrive = closed = 0.0
        for j, x in enumerate(sizes):
            if x > h:
                break
            total += popularity[j]
            arrive += got_p[j]
            closed += got_p[j] * w[h - x]
        if h == MILLI:
            arrive += model.p_whole
            w[h] = closed / arrive if arrive > 0 else float(h)
        elif arrive <= 0:
            w[h] = float(h)
        else:
            w[h] = (1.0 - arrive / total) * h + closed / total
    return np.array(w)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 999), min_size=1, max_size=8),
    whole=st.integers(0, 3),
    used=st.lists(st.integers(0, 1000), min_size=4, max_size=4),
)
def test_hole_waste_equals_the_direct_sums(sizes: list[int], whole: int, used: list[int]) -> None:
    pods = [PodRequest(1000, 4 * GI, gpus=1, gpu_milli=m) for m in sizes]
    pods += [PodRequest(1000, 4 * GI, gpus=1)] * whole
    snap = _fleet([(2, 64_000, 256, 0), (2, 64_000, 256, 0)])
    for i, m in enumerate(used):
        if m:
            snap.reserve(i // 2, Assignment(i // 2, gpu_milli=((i % 2, m),)))
    model = HoleModel(TaskMix.from_pods(pods))
    assert model.waste(snap).tobytes() == _waste_reference(model, snap).tobytes()


def test_kernel_classes_cover_every_position() -> None:
    """Rows of a batch fall in 1 (lone), block or tail classes; the tail classes of one batch
    size are distinct, so no two positions that may sum differently share a memo key."""
    for n in range(1, 40):
        classes = [score_memo.kernel_class(n, i) for i in range(n)]
        block = n & ~3
        assert all(c == 1 for c in classes[:block]) or n == 1
        tail = classes[block:] if n > 1 else []
        assert len(set(tail)) == len(tail)
        assert all(0 <= c < 16 for c in classes)


def test_pressure_falls_on_the_nodes_that_alone_can_hold_a_type() -> None:
    """A type only the big nodes can hold presses on them alone; with every type fitting
    every node there is no pressure. Two nodes alike but for their totals get different
    state ids (pressure depends on totals), so the memo never mixes them up."""
    snap = _fleet([(8, 128_000, 768, 0), (8, 96_000, 384, 0), (8, 96_000, 384, 0)])
    confined = PodRequest(cpu_milli=120_000, memory_bytes=700 * GI, gpus=8)
    small = PodRequest(cpu_milli=8000, memory_bytes=64 * GI, gpus=1)
    policy = GpuaasPolicy(TaskMix.from_pods([confined, small, small]))
    state = CycleState(pod=small, shape=PodShape.of(small))
    everything = np.arange(snap.size)
    policy.score(state, snap, everything)
    pressure = policy.pressure(snap)
    assert pressure[0] > 0 and pressure[1] == pressure[2] == 0
    scores = policy.score(CycleState(pod=small, shape=PodShape.of(small)), snap, everything)
    assert scores[0] < scores[1]  # the small task leaves the big node to the confined type
    free = GpuaasPolicy(TaskMix.from_pods([small]))
    free.score(CycleState(pod=small, shape=PodShape.of(small)), snap, everything)
    assert not free.pressure(snap).any()
    # node 0 brought to node 1's free CPU and memory: same free state, different totals
    snap.reserve(0, Assignment(0, cpu_milli=32_000, memory_bytes=384 * GI))
    assert snap.cpu_free[0] == snap.cpu_free[1] and snap.mem_free[0] == snap.mem_free[1]
    frag = score_memo.StateFragModel(policy.frag.mix)  # type: ignore[union-attr]
    frag.refresh(snap, everything)
    assert frag.key[0] != frag.key[1] and frag.key[1] == frag.key[2]


def test_a_cpu_only_task_pays_for_the_confined_gpus_its_cpu_would_have_fed() -> None:
    """On the only node that can host a 120-core 8-GPU type (128 cores), a CPU-only task that
    leaves the type's 120 cores costs nothing; one that eats into them costs the GPUs they
    would have fed, times the pressure; a node no confined type needs costs nothing. The
    fast score equals the vectorised one."""
    snap = _fleet([(8, 128_000, 768, 0), (8, 96_000, 384, 0), (8, 96_000, 384, 0)])
    confined = PodRequest(cpu_milli=120_000, memory_bytes=700 * GI, gpus=8)
    small = PodRequest(cpu_milli=8000, memory_bytes=64 * GI, gpus=1)
    light = PodRequest(cpu_milli=8000, memory_bytes=16 * GI)
    heavy = PodRequest(cpu_milli=32_000, memory_bytes=16 * GI)
    mix = TaskMix.from_pods([confined, small, small, light, heavy])
    policy = GpuaasPolicy(mix)
    everything = np.arange(snap.size)
    policy.score(CycleState(pod=small, shape=PodShape.of(small)), snap, everything)
    free = policy.frag.T[everything]  # type: ignore[union-attr]
    pressure = policy.pressure(snap)
    cost = policy.confined_cost(snap, PodShape.of(light), everything, free)
    assert not cost.any()  # 120 of 128 cores stay: the type still fits
    cost = policy.confined_cost(snap, PodShape.of(heavy), everything, free)
    # 96 cores left feed 96 / 120 of the type's 8 GPUs: 1600 milli-GPU of room taken
    assert cost[0] == pytest.approx(pressure[0] * 1600.0) and cost[1] == cost[2] == 0
    for pod in (light, heavy, small):
        got = policy.score(CycleState(pod=pod, shape=PodShape.of(pod)), snap, everything)
        want = _numpy_score(
            _reference(mix), CycleState(pod=pod, shape=PodShape.of(pod)), snap, everything
        )
        assert got.tobytes() == want.tobytes()
    heavy_scores = policy.score(CycleState(pod=heavy, shape=PodShape.of(heavy)), snap, everything)
    assert heavy_scores[0] < heavy_scores[1]  # the CPU-heavy task leaves the big node's cores
