"""Carving tenant clusters out of the fleet: which whole nodes a cluster gets and gives back.

Semantics (the service stores the result and carries it out; this module does no I/O):

- A cluster holds **whole nodes, exclusively**: a node is in at most one cluster, and a node
  is carved only when it is free (in no cluster, schedulable, holding no work). The service
  passes the free nodes of the pool (those matching its flavor or GPU model); the planner
  never sees a busy node as a candidate, and :func:`plan_pool` refuses one.
- **Topology-aware, best fit on domains**: the nodes come from one NVLink domain, else one
  rack, else one block, else one zone when any of those holds enough free nodes, and from the
  *smallest* such domain that does, so large domains stay whole for the clusters (and gangs)
  that need them. When no single domain at any level holds the count, whole domains are
  taken largest first while the remainder is at least their size, and the remainder is
  carved, by the same rule, from the domain that fits it best: the cluster spans as few
  domains as it can and splits at most one. Ties go to the lexically first domain and node,
  so a plan is deterministic.
- **Scale-in gives back the nodes that cost least**: idle nodes before busy ones (a busy node
  must first be drained: its jobs get their checkpoint signal, a cancel with a grace period,
  and are requeued), and among those the nodes of the domains the cluster holds least of,
  so what remains stays together. A busy node is only *marked* for release
  (``PoolPlan.drain``); the service gives it back once it carries no work. Deletion releases
  every node the same way.
- **Sizes**: a pool's target count lies in ``[min_count, max]`` (``max_count``, or ``count``
  when no maximum is given); a plan outside that, or beyond the free nodes, is refused with
  :class:`CarvingError` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gpuaas.model.cluster import NodePoolSpec
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node

#: Topology levels the planner tries, innermost (best) first.
LEVELS: tuple[Callable[[Node], str], ...] = (
    lambda n: n.topology.nvlink_domain,
    lambda n: n.topology.rack,
    lambda n: n.topology.block,
    lambda n: n.topology.zone,
)


class CarvingError(InvalidValue):
    """The plan cannot be made (a size outside the pool's bounds, too few free nodes)."""


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """What changes in one pool: ``carve`` joins now, ``release`` leaves now (idle),
    ``drain`` leaves once its work is drained."""

    carve: tuple[str, ...] = ()
    release: tuple[str, ...] = ()
    drain: tuple[str, ...] = ()


def check_count(pool: NodePoolSpec, count: int, field: str) -> None:
    """``count`` within the pool's bounds, or a :class:`CarvingError` naming ``field``."""
    if pool.min_count < 0 or pool.count < 0 or pool.max_count < 0:
        raise CarvingError(field, "counts cannot be negative")
    if pool.max_count and pool.min_count > pool.max_count:
        raise CarvingError(field, f"min {pool.min_count} is above max {pool.max_count}")
    if count < pool.min_count:
        raise CarvingError(field, f"{count} is below the pool's min of {pool.min_count}")
    if pool.max_count and count > pool.max_count:
        raise CarvingError(field, f"{count} is above the pool's max of {pool.max_count}")


def _key(node: Node, level: int) -> str:
    return LEVELS[level](node) if level < len(LEVELS) else ""


def choose(free: Sequence[Node], count: int, level: int = 0) -> list[Node]:
    """``count`` of ``free`` by best fit on domains (see the module docstring)."""
    if count <= 0:
        return []
    if count > len(free):
        raise CarvingError("count", f"{count} nodes wanted, {len(free)} free")
    if count == len(free) or level >= len(LEVELS):
        return sorted(free, key=lambda n: n.name)[:count]
    domains: dict[str, list[Node]] = {}
    for node in free:
        domains.setdefault(_key(node, level), []).append(node)
    if len(domains) == 1:
        return choose(free, count, level + 1)
    fits = [(len(nodes), name) for name, nodes in domains.items() if len(nodes) >= count]
    if fits:
        _, best = min(fits)
        return choose(domains[best], count, level + 1)
    chosen: list[Node] = []
    left = count
    by_size = sorted(domains.items(), key=lambda item: (-len(item[1]), item[0]))
    for _name, nodes in by_size:
        if len(nodes) <= left:
            chosen.extend(nodes)
            left -= len(nodes)
    if left:
        rest = [nodes for _name, nodes in by_size if nodes[0] not in chosen]
        best_rest = min((n for n in rest if len(n) >= left), key=len)
        chosen.extend(choose(best_rest, left, level + 1))
    return chosen


def choose_release(held: Sequence[Node], count: int, busy: Iterable[str]) -> list[Node]:
    """The ``count`` nodes of ``held`` to give back: idle first, then those of the domains
    the cluster holds fewest nodes of, then the lexically last (see the module docstring)."""
    busy = set(busy)
    sizes: dict[tuple[int, str], int] = {}
    for node in held:
        for level in range(len(LEVELS)):
            key = (level, _key(node, level))
            sizes[key] = sizes.get(key, 0) + 1

    def cost(node: Node) -> tuple[object, ...]:
        spread = tuple(sizes[(level, _key(node, level))] for level in range(len(LEVELS)))
        return (node.name in busy, spread, tuple(-ord(c) for c in node.name))

    return sorted(held, key=cost)[:count]


def plan_pool(
    pool: NodePoolSpec,
    held: Sequence[Node],
    free: Sequence[Node],
    busy: Iterable[str],
    target: int,
    field: str = "count",
) -> PoolPlan:
    """Take pool ``pool`` from the nodes it ``held`` to ``target`` nodes, carving from
    ``free`` (free nodes matching the pool; none of them may be ``busy``) or releasing."""
    check_count(pool, target, field)
    busy = frozenset(busy)
    taken = [n.name for n in free if n.name in busy]
    if taken:
        raise CarvingError(field, f"node {taken[0]} holds work and cannot be carved")
    if target > len(held):
        wanted = target - len(held)
        if wanted > len(free):
            raise CarvingError(
                field,
                f"{target} nodes asked for pool {pool.name}, it holds {len(held)} and "
                f"{len(free)} more are free",
            )
        return PoolPlan(carve=tuple(sorted(n.name for n in choose(free, wanted))))
    leaving = choose_release(held, len(held) - target, busy)
    return PoolPlan(
        release=tuple(sorted(n.name for n in leaving if n.name not in busy)),
        drain=tuple(sorted(n.name for n in leaving if n.name in busy)),
    )
