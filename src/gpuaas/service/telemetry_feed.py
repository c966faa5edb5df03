"""What the reconciler does for telemetry each cycle: feed the utilisation windows.

Every ``Settings.telemetry_interval`` seconds (checked each cycle) it tells the
:class:`~gpuaas.service.utilisation.Utilisation` the fleet (each node's metered devices and its
cluster), who holds what (the admitted and running jobs' recorded placements, typed as
backends read them, in the one device naming), and takes the samples of every non-blocking
backend that is a :class:`~gpuaas.backends.base.TelemetrySource` (the simulated fleet). When
the fleet changed, it hands those backends their nodes (``observe_fleet``) and the scrape
thread the nodes that name a dcgm-exporter (:mod:`gpuaas.service.dcgm_scrape`); those nodes
are read from their exporter only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpuaas.backends.base import Backend, TelemetrySource
from gpuaas.engine.admission.restore import PlacementLost, holds_devices, typed_pods
from gpuaas.model.cluster import CLUSTER_LABEL
from gpuaas.model.node import Node
from gpuaas.service.cluster_names import label_value
from gpuaas.service.dcgm_scrape import Scraper, exporter_url
from gpuaas.service.settings import Settings
from gpuaas.service.utilisation import Holding, Utilisation
from gpuaas.supply.telemetry import metered_devices, metered_name

log = logging.getLogger("gpuaas.telemetry")


class TelemetryFeed:
    """Owned by the reconciler (leader only); ``on_scrape`` counts scrape outcomes."""

    def __init__(
        self,
        utilisation: Utilisation,
        settings: Settings,
        on_scrape: Callable[[str], None] = lambda outcome: None,
    ) -> None:
        self.utilisation = utilisation
        self.interval = settings.telemetry_interval
        self.scraper = Scraper(utilisation, settings.telemetry_scrape_interval,
                               settings.telemetry_scrape_timeout, on_scrape)  # fmt: skip
        self._fed_at = -float("inf")
        self._fleet_key: object = None
        self._sources: list[Backend] = []

    def stop(self) -> None:
        self.scraper.stop()

    def due(self, now: float) -> bool:
        return now - self._fed_at >= self.interval

    def step(
        self,
        now: float,
        fleet_key: object,
        nodes: Iterable[Node],
        backend_of: Callable[[Node], Backend | None],
        jobs: Iterable[tuple[int, str, Mapping[str, Any], list[dict[str, Any]]]],
        node_of: Callable[[str], Node | None],
    ) -> None:
        """One feed: ``fleet_key`` changes when the fleet (or the set of backends) does;
        ``backend_of`` is a node's backend if it is built; ``jobs`` are the jobs holding
        devices as (id, tenant, spec, recorded placement)."""
        self._fed_at = now
        if fleet_key != self._fleet_key:
            self._set_fleet(list(nodes), backend_of)
            self._fleet_key = fleet_key  # only once it took: a failure is tried again
        self.utilisation.set_holdings(self._holdings(jobs, node_of))
        for backend in self._sources:
            try:
                self.utilisation.record(backend.samples(now))  # type: ignore[attr-defined]
            except Exception:  # telemetry never stops a reconcile step
                log.exception("telemetry from the %s backend failed", backend.name)

    def _set_fleet(self, nodes: list[Node], backend_of: Callable[[Node], Backend | None]) -> None:
        self.utilisation.set_fleet(
            {n.name: ([d.name for d in metered_devices(n)], n.labels.get(CLUSTER_LABEL, ""))
             for n in nodes}
        )  # fmt: skip
        scraped: dict[str, tuple[Node, str]] = {}
        by_backend: dict[str, tuple[Backend, list[Node]]] = {}
        for node in nodes:
            url = exporter_url(node)
            if url is not None:
                scraped[node.name] = (node, url)
                continue
            self.utilisation.set_condition(node.name, None)  # it names no exporter (now)
            backend = backend_of(node)
            if backend is not None:  # a backend not built (yet) reports nothing
                by_backend.setdefault(backend.name, (backend, []))[1].append(node)
        self._sources = []
        for backend, members in by_backend.values():
            if isinstance(backend, TelemetrySource) and not backend.blocking:
                observe = getattr(backend, "observe_fleet", None)
                if observe is not None:
                    observe(members)
                self._sources.append(backend)
        self.scraper.set_targets(scraped)

    @staticmethod
    def _holdings(
        jobs: Iterable[tuple[int, str, Mapping[str, Any], list[dict[str, Any]]]],
        node_of: Callable[[str], Node | None],
    ) -> dict[int, Holding]:
        out: dict[int, Holding] = {}
        for job_id, tenant, spec, placement in jobs:
            try:
                # only pods holding devices are metered: runs of cpu-only pods are skipped
                pods = typed_pods([p for p in placement if holds_devices(p)], node_of)
            except PlacementLost:
                continue  # its node left: the reconciler requeues it
            devices = {
                (pod.node, name)
                for pod in pods
                for ref in pod.devices
                if (name := metered_name(ref)) is not None
            }
            cluster = spec.get("cluster")
            out[job_id] = Holding(tenant, tuple(sorted(devices)),
                                  label_value(tenant, str(cluster)) if cluster else "",
                                  str(spec.get("name") or ""))  # fmt: skip
        return out
