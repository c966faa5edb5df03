"""Policies: each one's defining preference, and the fragmentation measure itself."""

from __future__ import annotations

import numpy as np
import pytest

from gpuaas.engine.framework import PodShape
from gpuaas.engine.place import Placement, place_pod, reserve
from gpuaas.engine.policies import POLICY_NAMES, make_policy
from gpuaas.engine.policies.base import FragModel, TaskMix
from gpuaas.engine.snapshot import Assignment, Snapshot
from gpuaas.model.devices import GPU, Partition
from gpuaas.model.node import Node
from gpuaas.model.workload import PodRequest

GI = 2**30


def node(name: str, gpus: int, cpu: int = 64000, mem: int = 256 * GI, model: str = "G2") -> Node:
    return Node(
        name,
        cpu,
        mem,
        [GPU(i, f"{name}-{i}", model, 16384, Partition.whole()) for i in range(gpus)],
    )


def mix_of(*pods: PodRequest) -> TaskMix:
    return TaskMix.from_pods(pods)


def test_frag_measure_counts_gpu_milli_a_task_cannot_use() -> None:
    snap = Snapshot.from_nodes([node("a", 2)])
    snap.reserve(0, Assignment(0, gpu_milli=((0, 600),)))  # GPU0: 400 free, GPU1: 1000 free
    half = PodRequest(cpu_milli=1000, gpus=1, gpu_milli=500)
    frag = FragModel(mix_of(half))
    frag.refresh(snap, np.array([0]))
    assert frag.F[0] == pytest.approx(400.0)  # GPU0's 400 cannot hold a 500 task
    whole = PodRequest(cpu_milli=1000, gpus=2)
    frag2 = FragModel(mix_of(whole))
    frag2.refresh(snap, np.array([0]))
    assert frag2.F[0] == pytest.approx(1400.0)  # two free GPUs needed: everything is lost
    hungry = PodRequest(cpu_milli=100_000, gpus=1, gpu_milli=100)
    frag3 = FragModel(mix_of(hungry))
    frag3.refresh(snap, np.array([0]))
    assert frag3.F[0] == pytest.approx(1400.0)  # not enough CPU on the node: all stranded


def test_mix_popularity_cut_and_renormalisation() -> None:
    pods = [PodRequest(1000, gpus=1)] * 6 + [PodRequest(2000, gpus=1, gpu_milli=500)] * 3
    pods += [PodRequest(3000)]
    mix = mix_of(*pods)
    assert mix.size == 3 and mix.prob.sum() == pytest.approx(1.0)
    assert mix.prob[0] == pytest.approx(0.6)
    cut = mix.reduce(popularity=0.6, step=1)
    assert cut.size == 1 and cut.prob.tolist() == [1.0]


def test_packing_prefers_a_used_gpu() -> None:
    snap = Snapshot.from_nodes([node("a", 2), node("b", 2)])
    snap.reserve(1, Assignment(1, gpu_milli=((1, 500),)))
    res = place_pod(snap, PodRequest(gpus=1, gpu_milli=300), make_policy("packing"))
    assert isinstance(res, Placement) and res.node == 1 and res.assignment.gpu_milli == ((1, 300),)


def test_bestfit_prefers_the_fuller_node() -> None:
    snap = Snapshot.from_nodes([node("a", 8), node("b", 2)])
    res = place_pod(snap, PodRequest(cpu_milli=1000, gpus=1), make_policy("bestfit"))
    assert isinstance(res, Placement) and res.node_name == "b"


def test_clustering_keeps_kinds_together() -> None:
    snap = Snapshot.from_nodes([node("a", 4), node("b", 4)])
    policy = make_policy("clustering")
    share = PodRequest(gpus=1, gpu_milli=200)
    first = place_pod(snap, share, policy, candidates=np.array([1]))
    assert isinstance(first, Placement)
    reserve(snap, share, first, policy)
    res = place_pod(snap, PodRequest(gpus=1, gpu_milli=300), policy)
    assert isinstance(res, Placement) and res.node_name == "b"
    whole = place_pod(snap, PodRequest(gpus=1), policy)
    assert isinstance(whole, Placement) and whole.node_name == "a"


def test_fgd_picks_the_gpu_that_fragments_least() -> None:
    snap = Snapshot.from_nodes([node("a", 2)])
    snap.reserve(0, Assignment(0, gpu_milli=((1, 500),)))
    mix = mix_of(PodRequest(1000, gpus=1), PodRequest(1000, gpus=1, gpu_milli=500))
    res = place_pod(snap, PodRequest(1000, gpus=1, gpu_milli=500), make_policy("fgd", mix=mix))
    assert isinstance(res, Placement) and res.assignment.gpu_milli == ((1, 500),)


def test_default_keeps_cpu_for_the_gpus_that_need_it() -> None:
    # Same GPUs; node "tight" has just the CPU its GPUs' tasks need, "rich" has plenty.
    snap = Snapshot.from_nodes([node("tight", 8, cpu=96000), node("rich", 2, cpu=104000)])
    mix = mix_of(*([PodRequest(12000, 8 * GI, gpus=1)] * 8 + [PodRequest(32000, 8 * GI)]))
    res = place_pod(snap, PodRequest(32000, 8 * GI), make_policy("gpuaas", mix=mix))
    assert isinstance(res, Placement) and res.node_name == "rich"


def test_default_learns_a_mix_online() -> None:
    snap = Snapshot.from_nodes([node("a", 2), node("b", 2)])
    policy = make_policy("gpuaas")
    for _ in range(5):
        pod = PodRequest(1000, GI, gpus=1, gpu_milli=500)
        res = place_pod(snap, pod, policy)
        assert isinstance(res, Placement)
        reserve(snap, pod, res, policy)
    assert sorted(np.sort(snap.gpu_free, axis=1).ravel().tolist()) == [0, 0, 500, 1000]


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_places_and_respects_capacity(name: str) -> None:
    snap = Snapshot.from_nodes([node("a", 2, cpu=8000), node("b", 4)])
    pods = [PodRequest(1000, GI, gpus=1, gpu_milli=m) for m in (300, 700, 500, 500)]
    pods += [PodRequest(2000, GI, gpus=2), PodRequest(3000, GI)]
    policy = make_policy(name, mix=TaskMix.from_pods(pods), seed=1)
    rng = np.random.default_rng(0)
    for pod in pods * 3:
        res = place_pod(snap, pod, policy, rng=rng)
        if isinstance(res, Placement):
            assert PodShape.of(pod).milli == res.assignment.milli_gpu
            reserve(snap, pod, res, policy)
    present = snap.gpu_free >= 0
    assert (snap.gpu_free[present] >= 0).all() and (snap.cpu_free >= 0).all()


def test_unknown_policy_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown policy 'best'"):
        make_policy("best")
    with pytest.raises(ValueError, match="needs the target task mix"):
        make_policy("fgd")


@pytest.mark.parametrize("name", ["fgd", "gpuaas", "clustering"])
def test_policy_caches_never_mix_snapshots(name: str) -> None:
    mix = mix_of(PodRequest(1000, GI, gpus=1, gpu_milli=500), PodRequest(1000, GI, gpus=2))
    pod = PodRequest(1000, GI, gpus=1, gpu_milli=500)
    used = Snapshot.from_nodes([node("a", 2), node("b", 2)])
    used.reserve(0, Assignment(0, gpu_milli=((0, 700),)))
    fresh = Snapshot.from_nodes([node("a", 2), node("b", 2)])
    shared = make_policy(name, mix=mix)
    first = place_pod(used, pod, shared)
    second = place_pod(fresh, pod, shared)
    alone = place_pod(fresh, pod, make_policy(name, mix=mix))
    assert isinstance(first, Placement) and isinstance(second, Placement)
    assert isinstance(alone, Placement)
    assert (second.node, second.assignment) == (alone.node, alone.assignment)
    assert second.score == pytest.approx(alone.score)
