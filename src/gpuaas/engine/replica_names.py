"""Which time-sliced (or MPS) replica of a GPU each admitted job holds, by name.

The engine counts replicas: ``(gpu slot, count)`` per pod is all admission needs, because the
replicas of one GPU are interchangeable. A backend and a user need more: the replica's identity
(``gpu-3-ts-1``, as the DRA driver publishes it), the same for as long as the job runs and
never the same for two jobs at once. :class:`ReplicaBook` gives it: when a job is admitted it
names the lowest replica indexes of each GPU that no other live job holds and writes them into
the job's recorded placement (``replicaIds``: ``[[slot, replica], ...]`` per pod), which is
what a restart reads back.

The book forgets lazily: an entry whose job is no longer live (finished, requeued, cancelled:
``alive(job_id, attempt)`` says) is dropped the next time its GPU is looked at, so no release
path has to remember to call it. Replicas a DRA claim named (``.../gpu-3-ts-1`` in the pod's
``devices``) are held as well.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

_CLAIMED = re.compile(r"/gpu-(\d+)-ts-(\d+)\Z")
Alive = Callable[[int, int], bool]


class ReplicaBook:
    def __init__(self) -> None:
        #: (node, gpu slot) -> job id -> (attempt, replica indexes)
        self._held: dict[tuple[str, int], dict[int, tuple[int, set[int]]]] = {}

    def name(
        self, job_id: int, attempt: int, placement: Iterable[dict[str, Any]], alive: Alive
    ) -> None:
        """Name the replicas of every pod of ``placement`` (in place, as ``replicaIds``);
        pods that already carry names (read back after a restart) keep them."""
        for pod in placement:
            a = pod.get("assignment") or {}
            node = str(pod.get("node"))
            named = [tuple(x) for x in a.get("replicaIds") or ()]
            if named:
                for g, r in named:
                    self._hold(node, int(g), job_id, attempt, {int(r)})
                continue
            for g, r in _claimed(a):
                self._hold(node, g, job_id, attempt, {r})
            ids: list[list[int]] = []
            for g, count in a.get("replicas") or ():
                taken = self._taken(node, int(g), job_id, attempt, alive)
                free = (r for r in range(len(taken) + int(count)) if r not in taken)
                mine = {next(free) for _ in range(int(count))}
                self._hold(node, int(g), job_id, attempt, mine)
                ids.extend([int(g), r] for r in sorted(mine))
            if ids:
                a["replicaIds"] = ids

    def _taken(self, node: str, g: int, job_id: int, attempt: int, alive: Alive) -> set[int]:
        holders = self._held.get((node, g), {})
        for other in [j for j, (att, _) in holders.items() if not alive(j, att)]:
            del holders[other]
        return {
            r for j, (att, ids) in holders.items() if (j, att) != (job_id, attempt) for r in ids
        }

    def _hold(self, node: str, g: int, job_id: int, attempt: int, ids: set[int]) -> None:
        holders = self._held.setdefault((node, g), {})
        held = holders.get(job_id)
        if held is not None and held[0] == attempt:
            held[1].update(ids)
        else:
            holders[job_id] = (attempt, set(ids))


def _claimed(assignment: Mapping[str, Any]) -> list[tuple[int, int]]:
    """Replicas a DRA claim took, by the GPU index in its device name (slot == index here:
    a published replica's GPU index is its slot on the node)."""
    out = []
    for name in assignment.get("devices") or ():
        m = _CLAIMED.search(str(name))
        if m:
            out.append((int(m.group(1)), int(m.group(2))))
    return out
