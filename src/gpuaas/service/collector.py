"""Python's cyclic garbage collector, tuned for a server that answers pages of a big fleet.

CPython collects its youngest generation every 700 net allocations and the whole heap every
hundred of those. A console page of the openb fleet (1,213 nodes, 20,000 jobs) allocates tens
of thousands of short-lived objects, so with the defaults one request in a few pays a full
collection over everything the server keeps (the engine's snapshot, caches, SQLAlchemy's
mappers): `gpuaas bench console` on a quiet machine measured a page's p99 at 270-420 ms
against a p50 of 40-50 ms, and with collection off every page's p99 at 70 ms or less
(docs/benchmarks.md, "the collector"). The server makes almost no
reference cycles on a request's path, so collecting less often delays little garbage.

The first start in a process also collects once and then moves everything alive out of the
collector's view (`gc.freeze`): the modules, the ORM's mappers and the app's start-up state live
as long as the process, and a full collection no longer walks them. Only the first start does
it: a process that starts the app again (the tests, thousands of times) would otherwise pay a
full collection each time and freeze what earlier apps left behind.
"""

from __future__ import annotations

import gc

#: (youngest, middle, oldest) thresholds: a young collection every 5,000 net allocations, a
#: middle one every 5 of those (kept small: a middle collection walks what survived the young
#: ones, and a page's objects alive mid-request survive; 20 young ones gave a 345 ms middle
#: collection), a full one every 50 middle ones (CPython's defaults: 700, 10, 10).
THRESHOLDS = (5_000, 5, 50)


def tune() -> None:
    """Collect less often (called once the server has started); thresholds already set higher
    are kept. The process's first call also freezes what is alive (see the module)."""
    if gc.get_threshold()[0] < THRESHOLDS[0]:
        gc.set_threshold(*THRESHOLDS)
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()
