"""The discrete-event core: a virtual clock and a heap of timed events.

The simulator owns time; the engine never reads a clock. Events at the same instant are handled
in a fixed order (finishes and repairs free capacity before arrivals ask for it, failures last)
and then by insertion sequence, so a run is fully reproducible from its inputs and seed.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import IntEnum

from gpuaas.model.errors import GpuaasError


class EventKind(IntEnum):
    """Event kinds; the value is the order among events at the same instant."""

    FINISH = 0
    REPAIR = 1
    SCALE_UP = 2
    ARRIVAL = 3
    PREEMPT = 4
    FAIL = 5
    SCALE_DOWN = 6
    TICK = 7


@dataclass(frozen=True, slots=True)
class Event:
    """One event: ``payload`` is a job index, a node index or a list of nodes by kind."""

    time: float
    kind: EventKind
    payload: object = None
    #: For FINISH: the run number of the job it ends (a stale finish of an evicted run is ignored).
    epoch: int = 0


@dataclass(slots=True)
class Clock:
    """Virtual time; it only moves forward."""

    now: float = 0.0

    def advance(self, to: float) -> None:
        if to < self.now:
            raise GpuaasError(f"event at {to} is before the clock ({self.now}): time went back")
        self.now = to


@dataclass(slots=True)
class EventQueue:
    """A heap of events ordered by (time, kind, insertion sequence)."""

    _heap: list[tuple[float, int, int, Event]] = field(default_factory=list)
    _seq: int = 0

    def push(self, event: Event) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (event.time, int(event.kind), self._seq, event))

    def pop(self) -> Event:
        return heapq.heappop(self._heap)[3]

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop_batch(self) -> list[Event]:
        """Every event at the earliest time, in handling order."""
        if not self._heap:
            return []
        t = self._heap[0][0]
        out = []
        while self._heap and self._heap[0][0] == t:
            out.append(heapq.heappop(self._heap)[3])
        return out

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)
