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
    if count > pool.upper:
        raise CarvingError(field, f"{count} is above the pool's max of {pool.upper}")


def _key(node: Node, level: int) -> str:
    """The node's domain at ``level``; a node whose domain is not known is a domain of its
    own (nodes without a rack are not one rack)."""
    return LEVELS[level](node) or f"\0{node.name}"


def _domains(nodes: Sequence[Node], level: int) -> dict[str, list[Node]]:
    out: dict[str, list[Node]] = {}
    for node in nodes:
        out.setdefault(_key(node, level), []).append(node)
    return out


def _by_name(nodes: Sequence[Node], count: int) -> list[Node]:
    return sorted(nodes, key=lambda n: n.name)[:count]


def choose(free: Sequence[Node], count: int, top: int = len(LEVELS) - 1) -> list[Node]:
    """``count`` of ``free`` by best fit on domains (see the module docstring): the smallest
    domain of the innermost level (up to ``top``) that holds ``count``; within it, or over
    the whole set when none does, :func:`_span`."""
    if count <= 0:
        return []
    if count > len(free):
        raise CarvingError("count", f"{count} nodes wanted, {len(free)} free")
    if count == len(free):
        return _by_name(free, count)
    for level in range(top + 1):
        fits = [(len(ns), k) for k, ns in _domains(free, level).items() if len(ns) >= count]
        if fits:
            _, best = min(fits)
            domain = _domains(free, level)[best]
            return _by_name(domain, count) if level == 0 else _span(domain, count, level - 1)
    return _span(free, count, top)


def _span(nodes: Sequence[Node], count: int, level: int) -> list[Node]:
    """``count`` of ``nodes``, which no single domain of ``level`` holds: whole domains,
    largest first, while the remainder is at least their size; the remainder from the domain
    that fits it best (:func:`choose` inside it). A level no node knows is skipped."""
    if count >= len(nodes) or level < 0:
        return _by_name(nodes, count)
    domains = _domains(nodes, level)
    if all(k.startswith("\0") for k in domains):
        return _span(nodes, count, level - 1)
    chosen: list[Node] = []
    left = count
    rest: list[list[Node]] = []
    for _k, members in sorted(domains.items(), key=lambda item: (-len(item[1]), item[0])):
        if len(members) <= left:
            chosen.extend(members)
            left -= len(members)
        else:
            rest.append(members)
    if left:
        best = min((m for m in rest if len(m) >= left), key=len)
        chosen.extend(choose(best, left, level - 1) if level > 0 else _by_name(best, left))
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
