"""Datasets warm on Kubernetes nodes, as Fluid says: the reconciler's half for Fluid.

On the local backend a preload copies files and "warm" is checked on the files
(:mod:`gpuaas.service.datasets`). On Kubernetes the cache is Fluid's, so both halves go
through the cluster (:mod:`gpuaas.backends.kubernetes.fluid_status`), every
:data:`REPORT_EVERY` seconds, outside any database transaction (the calls are network calls):

- **a preload** (``loading`` rows on nodes of a Kubernetes backend) applies the dataset's
  Fluid ``Dataset``, runtime and a ``DataLoad`` pinned to those nodes, in the tenant's
  namespace (:meth:`KubernetesBackend.preload_dataset`); the rows stay ``loading`` until the
  DataLoad says: ``Complete`` turns the nodes that run one of the dataset's cache workers
  ``warm`` (source ``preload``) and any other node asked ``failed`` (Fluid put no cache
  there), ``Failed`` turns them all ``failed`` with Fluid's reason. A refused object (invalid,
  Fluid not installed) fails them at once with the API server's words; an unreachable API
  server leaves them ``loading``, retried at the next report. A ``thin`` dataset has no cache
  to load: its preload fails at once.
- **the report**: every registered dataset is read back from each Kubernetes backend; nodes
  Fluid holds it warm on that gpuaas did not know of yet (a job read all of it through the
  PVC, an operator's DataLoad) turn ``warm`` (source ``backend``), and a warm node that is
  no longer one of its cache workers (the dataset or runtime deleted, the worker moved) is
  forgotten.

Both turn warm through :func:`gpuaas.service.datasets.mark_warm`, the path every report
takes, so the node cache's capacity and its least-recently-used eviction hold as on the other
backends. A node Fluid reports is marked once, when it appears (not at every report): an
entry gpuaas evicted for room comes back only when Fluid's worker placement changes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from gpuaas.backends.base import BackendUnavailable
from gpuaas.backends.kubernetes.backend import KubernetesBackend, PreloadRefused
from gpuaas.backends.kubernetes.fluid import fluid_name
from gpuaas.backends.kubernetes.fluid_status import FluidState
from gpuaas.model.dataset import CacheRuntime, Dataset
from gpuaas.model.errors import InvalidValue
from gpuaas.service import datasets as ds
from gpuaas.store.db import Database
from gpuaas.store.tables import DatasetCache, DatasetRow, Tenant

log = logging.getLogger("gpuaas.datasets")

#: seconds between two reads of Fluid's state
REPORT_EVERY = 5.0

#: every fleet node whose backend is Kubernetes, with that backend
FluidNodes = Callable[[], Mapping[str, KubernetesBackend]]


@dataclass(slots=True)
class _Asked:
    """The loading caches of one dataset on one backend's nodes."""

    nodes: dict[str, float]  # node -> when the preload was asked (its used_at)

    @property
    def at(self) -> float:
        return max(self.nodes.values())


class FluidSync:
    """See the module docstring. ``caches_of`` is the reconciler's (for the other backends'
    nodes, whose files an eviction deletes); ``fluid_nodes`` names the Kubernetes nodes."""

    def __init__(
        self, db: Database, capacity: int, caches_of: ds.CachesOf, fluid_nodes: FluidNodes
    ) -> None:
        self.db = db
        self.capacity = capacity
        self.caches_of = caches_of
        self.fluid_nodes = fluid_nodes
        self._at = -math.inf
        #: (dataset id, backend name) -> the warm nodes Fluid reported last time
        self._reported: dict[tuple[int, str], frozenset[str]] = {}

    def _files(self, fluid: Mapping[str, Any]) -> ds.CachesOf:
        """The caches for :func:`mark_warm`: none of their own on a Fluid node (Fluid said)."""
        return lambda node: None if node in fluid else self.caches_of(node)

    def step(self, now: float) -> bool:
        """Run the preloads and read the report when due; True when anything changed."""
        if now - self._at < REPORT_EVERY:
            return False
        self._at = now
        fluid = self.fluid_nodes()
        if not fluid:
            return False
        backends = {b.name: b for b in fluid.values()}
        with self.db.session() as session:
            rows = session.execute(
                select(DatasetRow, Tenant.name).join(Tenant, Tenant.id == DatasetRow.tenant_id)
            ).all()
            datasets = {row.id: ds.dataset_of(row, tenant) for row, tenant in rows}
            asked: dict[tuple[int, str], _Asked] = {}
            warm: dict[tuple[int, str], set[str]] = {}
            for cache in session.scalars(
                select(DatasetCache).where(DatasetCache.node.in_(list(fluid)))
            ):
                key = (cache.dataset_id, fluid[cache.node].name)
                if cache.state == ds.LOADING:
                    asked.setdefault(key, _Asked({})).nodes[cache.node] = cache.used_at or 0.0
                elif cache.state == ds.WARM:
                    warm.setdefault(key, set()).add(cache.node)
        changed = False
        for key in [k for k in self._reported if k[0] not in datasets]:  # deleted since
            del self._reported[key]
        for dataset_id, dataset in datasets.items():
            for name, backend in backends.items():
                key = (dataset_id, name)
                mine = {n for n, b in fluid.items() if b.name == name}
                try:
                    changed |= self._one(key, dataset, backend, asked.get(key),
                                         warm.get(key, set()), mine, fluid, now)  # fmt: skip
                except Exception:  # one dataset's trouble must not stop the reconciler
                    log.exception("dataset %s: reading Fluid's state failed", dataset.name)
        return changed

    def _one(
        self,
        key: tuple[int, str],
        dataset: Dataset,
        backend: KubernetesBackend,
        asked: _Asked | None,
        warm: set[str],
        mine: set[str],
        fluid: Mapping[str, KubernetesBackend],
        now: float,
    ) -> bool:
        """Preload and report one dataset on one backend's nodes (module docstring)."""
        failed: dict[str, str] = {}
        loaded: set[str] = set()
        try:
            if asked is not None and dataset.runtime is CacheRuntime.THIN:
                thin = "a thin dataset has no cache of its own to load (Fluid ThinRuntime)"
                failed = dict.fromkeys(asked.nodes, thin)
            elif asked is not None:
                try:
                    backend.preload_dataset(dataset, sorted(asked.nodes), asked.at)
                except (PreloadRefused, InvalidValue) as exc:
                    failed = dict.fromkeys(asked.nodes, f"Fluid preload refused: {exc}")
            state = backend.fluid_state(dataset, asked.at if asked and not failed else None)
        except BackendUnavailable as exc:
            log.warning("dataset %s: %s (retried)", dataset.name, exc)
            return self._write(key, dataset, failed, loaded, set(), set(), asked, now, fluid)
        if asked is not None and not failed:
            where = f"Fluid DataLoad {fluid_name(dataset.name)}-preload"
            if state.load == "Failed":
                failed = dict.fromkeys(asked.nodes, f"{where} failed: {state.reason}")
            elif state.load == "Complete":
                loaded = set(asked.nodes) & state.warm
                for node in set(asked.nodes) - state.warm:
                    workers = ", ".join(sorted(state.workers)) or "none"
                    failed[node] = (
                        f"{where} completed but Fluid keeps no cache of it on {node} "
                        f"(its cache workers: {workers})"
                    )
        before = self._reported.get(key, frozenset())
        self._reported[key] = state.warm
        reported = (set(state.warm) - before - warm - loaded) & mine
        gone = {n for n in warm if not _holds(state, n)}
        return self._write(key, dataset, failed, loaded, reported, gone, asked, now, fluid)

    def _write(
        self,
        key: tuple[int, str],
        dataset: Dataset,
        failed: dict[str, str],
        loaded: set[str],
        reported: set[str],
        gone: set[str],
        asked: _Asked | None,
        now: float,
        fluid: Mapping[str, KubernetesBackend],
    ) -> bool:
        if not (failed or loaded or reported or gone):
            return False
        from gpuaas.service.jobs import serialized_writes  # jobs imports datasets

        with serialized_writes(self.db.engine), self.db.session() as session:
            row = session.get(DatasetRow, key[0])
            if row is None:  # deleted meanwhile
                return False
            caches = {
                c.node: c
                for c in session.scalars(
                    select(DatasetCache).where(DatasetCache.dataset_id == row.id)
                )
            }
            # a cache asked again since it was read is left for the next report
            current = {
                n
                for n in set(failed) | loaded
                if n in caches
                and caches[n].state == ds.LOADING
                and asked is not None
                and caches[n].used_at == asked.nodes.get(n)
            }
            for node in set(failed) & current:
                caches[node].state, caches[node].error = ds.FAILED, failed[node]
            for node in gone:
                if node in caches and caches[node].state == ds.WARM:
                    session.delete(caches[node])
            session.flush()
            files = self._files(fluid)
            ds.mark_warm(session, row, sorted(loaded & current), ds.BY_PRELOAD, now,
                         self.capacity, files)  # fmt: skip
            ds.mark_warm(session, row, sorted(reported), ds.BY_BACKEND, now,
                         self.capacity, files)  # fmt: skip
            ds.bump(session)
        return True


def _holds(state: FluidState, node: str) -> bool:
    """Whether Fluid still keeps a cache of the dataset on ``node``."""
    return state.exists and state.bound and node in state.workers
