"""The demo batch on the demo fleet: what `make run` shows must be what the engine decided."""

from __future__ import annotations

from gpuaas.engine.gang import GangPlacement
from gpuaas.engine.place import Unschedulable
from gpuaas.sim.demo import schedule_demo
from gpuaas.supply.loaders import load_demo_fleet


def _decisions() -> dict[str, GangPlacement | Unschedulable]:
    fleet = load_demo_fleet()
    return {d.workload.name: d.result for d in schedule_demo(fleet.nodes)}


def test_training_gang_sits_in_one_nvlink_domain() -> None:
    fleet = load_demo_fleet()
    result = _decisions()["llm-pretrain"]
    assert isinstance(result, GangPlacement)
    domains = {fleet.nodes[p.placement.node].topology.nvlink_domain for p in result}
    assert len(result) == 4 and len(domains) == 1 and "" not in domains


def test_gang_larger_than_any_domain_is_pending_with_a_reason() -> None:
    result = _decisions()["llm-too-big"]
    assert isinstance(result, Unschedulable)
    assert "6 pods of 8 GPUs in one NVLink domain" in result.reason


def test_every_other_workload_is_placed_on_the_hardware_it_asks_for() -> None:
    fleet = load_demo_fleet()
    decisions = _decisions()
    for name in ("finetune", "chat-inference", "embedding-api", "notebooks", "dra-pair"):
        assert isinstance(decisions[name], GangPlacement), (name, decisions[name])
    mig_nodes = [fleet.nodes[p.placement.node] for p in decisions["chat-inference"]]
    assert all(p.assignment.mig for p in decisions["chat-inference"])
    assert all(node.gpu_model == "A100-80GB" for node in mig_nodes)
    assert all(p.assignment.replicas for p in decisions["embedding-api"])
    pair = next(iter(decisions["dra-pair"]))
    assert len(pair.assignment.devices) == 2
    assert fleet.nodes[pair.placement.node].gpu_model == "H100-80GB"


def test_no_gpu_is_given_twice() -> None:
    taken: dict[tuple[int, int], int] = {}
    for result in _decisions().values():
        if isinstance(result, Unschedulable):
            continue
        for pod in result:
            for gpu, milli in pod.assignment.gpu_milli:
                key = (pod.placement.node, gpu)
                taken[key] = taken.get(key, 0) + milli
    assert taken and all(milli <= 1000 for milli in taken.values())
