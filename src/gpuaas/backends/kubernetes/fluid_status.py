"""Where Fluid holds a dataset warm, read from the objects Fluid writes back.

Fluid says where a dataset's cache is in three places, none of which alone is enough:

* the ``Dataset``'s ``status``: ``phase`` ``Bound`` once a runtime serves it, ``cacheStates``
  (``cached``, ``cacheCapacity``, ``cachedPercentage`` as ``"100.0%"``: how much of the data is
  in the cache, over all the cache workers), and ``hcfs.endpoint`` (the runtime's address);
* the runtime's worker placement: Fluid labels every node that runs one of the dataset's cache
  workers ``fluid.io/s-<namespace>-<dataset>=true`` (the label its own pods' preferred
  affinity names), and the runtime's ``status.cacheAffinity`` is a node affinity on that label;
* a ``DataLoad``'s ``status.phase``: ``Complete`` when the load has put the data in the cache,
  ``Failed`` with the reason in its ``Failed`` condition.

So a dataset is **warm** on the nodes labelled for it when it is bound and its data is in the
cache: the preload's ``DataLoad`` is ``Complete``, or ``cachedPercentage`` is 100 % (a job that
read all of it filled the cache). A ``ThinRuntime`` has no cache: a thin dataset is never warm.
:func:`fluid_state` turns the objects into a :class:`FluidState`; the backend reads them
(:meth:`~gpuaas.backends.kubernetes.backend.KubernetesBackend.fluid_state`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

LOAD_COMPLETE, LOAD_FAILED = "Complete", "Failed"
#: Fluid's label on a node that runs one of the dataset's cache workers
LABEL_PREFIX = "fluid.io/s-"


def cache_label(namespace: str, name: str) -> str:
    """The node label Fluid puts where dataset ``namespace/name`` has a cache worker."""
    return f"{LABEL_PREFIX}{namespace}-{name}"


def label_of(runtime: Mapping[str, Any] | None, namespace: str, name: str) -> str:
    """The worker label the runtime's ``status.cacheAffinity`` names (Fluid's own spelling,
    which it may shorten for a long name), else :func:`cache_label`."""
    affinity = ((runtime or {}).get("status") or {}).get("cacheAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            key = str(expr.get("key") or "")
            if key.startswith(LABEL_PREFIX):
                return key
    return cache_label(namespace, name)


def cached_percent(dataset: Mapping[str, Any] | None) -> float:
    """``status.cacheStates.cachedPercentage`` as a number (0 when absent or unreadable)."""
    states = ((dataset or {}).get("status") or {}).get("cacheStates") or {}
    text = str(states.get("cachedPercentage") or "").strip().rstrip("%")
    try:
        return float(text)
    except ValueError:
        return 0.0


def _failure(load: Mapping[str, Any]) -> str:
    for c in (load.get("status") or {}).get("conditions") or []:
        if c.get("type") == LOAD_FAILED:
            return ": ".join(str(x) for x in (c.get("reason"), c.get("message")) if x)
    return ""


@dataclass(frozen=True, slots=True)
class FluidState:
    """What Fluid says of one dataset: ``exists`` (its ``Dataset`` is there), ``bound``,
    ``workers`` (the nodes labelled for it), ``warm`` (the workers when the data is in the
    cache, else none), the preload's ``load`` phase ("" without one) and, when it failed,
    ``reason``."""

    exists: bool
    bound: bool = False
    workers: frozenset[str] = frozenset()
    warm: frozenset[str] = frozenset()
    load: str = ""
    reason: str = ""


def fluid_state(
    dataset: Mapping[str, Any] | None,
    load: Mapping[str, Any] | None,
    nodes: Iterable[Mapping[str, Any]],
    label: str,
    thin: bool = False,
) -> FluidState:
    """The state of a dataset from its Fluid ``Dataset`` (None: not there), its preload's
    ``DataLoad`` (None: none), and the nodes carrying ``label`` (see the module docstring)."""
    if dataset is None:
        return FluidState(exists=False)
    bound = ((dataset.get("status") or {}).get("phase") or "") == "Bound"
    workers = frozenset(
        str((n.get("metadata") or {}).get("name"))
        for n in nodes
        if ((n.get("metadata") or {}).get("labels") or {}).get(label) == "true"
    )
    phase = str(((load or {}).get("status") or {}).get("phase") or "")
    reason = ""
    if phase == LOAD_FAILED:
        reason = _failure(load or {}) or "the DataLoad failed"
    full = phase == LOAD_COMPLETE or cached_percent(dataset) >= 100.0
    warm = workers if bound and full and not thin else frozenset()
    return FluidState(True, bound, workers, warm, phase, reason)
