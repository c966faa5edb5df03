"""Placement policies (score plugins). :func:`make_policy` builds one by name."""

from __future__ import annotations

from gpuaas.engine.policies.base import Policy, TaskMix
from gpuaas.engine.policies.bestfit import BestFitPolicy
from gpuaas.engine.policies.clustering import GpuClusteringPolicy
from gpuaas.engine.policies.default import DEFAULT_POLICY, GpuaasPolicy
from gpuaas.engine.policies.dotprod import DotProductPolicy
from gpuaas.engine.policies.fgd import FGD_POPULARITY, FGD_STEP, FgdPolicy
from gpuaas.engine.policies.packing import GpuPackingPolicy
from gpuaas.engine.policies.random import RandomPolicy

#: Policy names, in the order the FGD paper lists its baselines, our default last.
POLICY_NAMES: tuple[str, ...] = (
    "random",
    "dotprod",
    "clustering",
    "packing",
    "bestfit",
    "fgd",
    DEFAULT_POLICY,
)
#: Our names -> the published names in ``fgd_published_allocation.csv``.
PUBLISHED_NAMES: dict[str, str] = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "clustering": "03-GpuClustering",
    "packing": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}


def make_policy(name: str, mix: TaskMix | None = None, seed: int = 0) -> Policy:
    """Build a policy by name. ``mix`` (the target task mix) is needed by ``fgd``; our default
    learns the mix from the tasks it places when none is given."""
    key = name.strip().lower()
    if key == "random":
        return RandomPolicy(seed)
    if key == "dotprod":
        return DotProductPolicy()
    if key == "clustering":
        return GpuClusteringPolicy()
    if key == "packing":
        return GpuPackingPolicy()
    if key == "bestfit":
        return BestFitPolicy()
    if key == "fgd":
        if mix is None:
            raise ValueError("policy fgd needs the target task mix")
        return FgdPolicy(mix.reduce(FGD_POPULARITY, FGD_STEP, with_memory=False))
    if key == DEFAULT_POLICY:
        return GpuaasPolicy(mix)
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")


__all__ = [
    "DEFAULT_POLICY",
    "POLICY_NAMES",
    "PUBLISHED_NAMES",
    "BestFitPolicy",
    "DotProductPolicy",
    "FgdPolicy",
    "GpuClusteringPolicy",
    "GpuPackingPolicy",
    "GpuaasPolicy",
    "Policy",
    "RandomPolicy",
    "TaskMix",
    "make_policy",
]
