"""The idle-capacity pool's two choices, pure: which idle nodes move into the pool, and which
pool nodes to take back when tenants need capacity.

CONTRACT (written by the lead, implemented by the ``idlepool`` helper): the service
(``service/idle_pool.py``) and the simulator (``sim/whatif.py``) call these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuaas.model.autoscale import IdlePoolSpec


@dataclass(frozen=True, slots=True)
class FreeNode:
    """A node in no cluster, unallocated since ``idle_since``; unhealthy, cordoned or
    partly allocated nodes are not offered (whole nodes only)."""

    name: str
    idle_since: float
    gpus: int


@dataclass(frozen=True, slots=True)
class PoolNode:
    """A node the pool holds and the pool jobs running on it (a job may span nodes)."""

    name: str
    gpus: int
    jobs: tuple[int, ...]


def settle(free: Sequence[FreeNode], spec: IdlePoolSpec, pool_size: int, now: float) -> list[str]:
    """Nodes idle for at least ``spec.settle_seconds`` that move into the pool now, within
    ``spec.max_nodes``."""
    raise NotImplementedError("implemented by the idlepool helper")


def reclaim(pool: Sequence[PoolNode], count: int, matches: Callable[[str], bool]) -> list[str]:
    """``count`` pool nodes that ``matches`` accepts, chosen so the fewest pool jobs are
    disturbed (empty nodes first; a job's other nodes before a new job's)."""
    raise NotImplementedError("implemented by the idlepool helper")
