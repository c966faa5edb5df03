"""Scraping the dcgm-exporters nodes name, beside the reconciler.

A node names its exporter with the label ``gpuaas.io/dcgm-exporter`` (its ``/metrics`` URL,
``http`` or ``https``), set like any label through the inventory and ``PUT /v1/nodes``. Such a
node's GPU telemetry comes from its exporter only (the simulated fleet does not synthesise it).

Scrapes run in a thread of their own (a slow exporter never holds up admission), every
``Settings.telemetry_scrape_interval`` seconds, a few nodes at a time, each with
``telemetry_scrape_timeout``. Nothing a node's exporter does stops the others or the thread: a
refused connection, a timeout or an HTTP error is the node condition ``TelemetryScrapeFailed``,
text that is not Prometheus metrics ``TelemetryUnreadable``, rows that match no device (or
devices with no usable reading) ``TelemetryPartial`` (the readings that did match are kept);
each scrape is counted by outcome in ``gpuaas_dcgm_scrapes_total``. A node whose scrapes fail
keeps its old samples, which go stale and then read *unknown* (see
:mod:`gpuaas.service.utilisation`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from gpuaas.engine.reasons import Code, Reason
from gpuaas.model.node import Node
from gpuaas.service.utilisation import NodeCondition, Utilisation
from gpuaas.supply.dcgm import ExporterTextError, read_exporter

log = logging.getLogger("gpuaas.telemetry")

#: The node label naming the node's dcgm-exporter URL.
DCGM_EXPORTER_LABEL = "gpuaas.io/dcgm-exporter"
#: Nodes scraped at once.
WORKERS = 8
#: How much of an answer is read (an exporter's page is tens of kB per GPU at most).
MAX_BYTES = 8 << 20


def exporter_url(node: Node) -> str | None:
    """The node's dcgm-exporter URL, if it names one."""
    url = node.labels.get(DCGM_EXPORTER_LABEL, "").strip()
    return url or None


class Outcome:
    OK = "ok"
    PARTIAL = "partial"
    FAILED = "failed"
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class Scraped:
    outcome: str
    samples: int
    condition: NodeCondition | None


def scrape_node(
    node: Node, url: str, utilisation: Utilisation, timeout: float, client: httpx.Client
) -> Scraped:
    """Scrape one node's exporter into ``utilisation`` and set its condition; never raises for
    anything the exporter does."""
    at = time.time()
    try:
        with client.stream("GET", url, timeout=timeout) as response:
            response.raise_for_status()
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_BYTES:
                    raise httpx.HTTPError(f"answer larger than {MAX_BYTES} bytes")
        text = body.decode("utf-8", errors="replace")
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        detail = str(exc) or type(exc).__name__
        cond = NodeCondition(Reason(Code.TELEMETRY_SCRAPE_FAILED, {"url": url, "detail": detail}),
                             at)  # fmt: skip
        utilisation.set_condition(node.name, cond)
        return Scraped(Outcome.FAILED, 0, cond)
    try:
        reading = read_exporter(text, node, at)
    except ExporterTextError as exc:
        cond = NodeCondition(Reason(Code.TELEMETRY_UNREADABLE, {"url": url, "detail": str(exc)}),
                             at)  # fmt: skip
        utilisation.set_condition(node.name, cond)
        return Scraped(Outcome.UNREADABLE, 0, cond)
    kept = utilisation.record(reading.samples)
    if reading.unmatched or reading.unreported:
        fields = {"unmatched": reading.unmatched, "unreported": reading.unreported}
        cond = NodeCondition(Reason(Code.TELEMETRY_PARTIAL, fields), at)
        utilisation.set_condition(node.name, cond)
        return Scraped(Outcome.PARTIAL, kept, cond)
    utilisation.set_condition(node.name, None)
    return Scraped(Outcome.OK, kept, None)


class Scraper:
    """The scrape thread: :meth:`set_targets` (called by the reconciler's telemetry feed when
    the fleet changes) says which nodes name an exporter; every ``interval`` it scrapes them.
    ``on_scrape`` counts outcomes (the metric)."""

    def __init__(
        self,
        utilisation: Utilisation,
        interval: float,
        timeout: float,
        on_scrape: Callable[[str], None] = lambda outcome: None,
    ) -> None:
        self.utilisation = utilisation
        self.interval = interval
        self.timeout = timeout
        self.on_scrape = on_scrape
        self._targets: dict[str, tuple[Node, str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_targets(self, targets: Mapping[str, tuple[Node, str]]) -> None:
        with self._lock:
            self._targets = dict(targets)
        if self._targets and self._thread is None:
            self.start()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="gpuaas-dcgm-scrape", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 5)
            self._thread = None

    def scrape_all(self) -> list[Scraped]:
        """One round over every target (the thread's loop; tests call it directly)."""
        with self._lock:
            targets = list(self._targets.values())
        if not targets:
            return []
        with httpx.Client(follow_redirects=False) as client, ThreadPoolExecutor(WORKERS) as pool:
            done = list(
                pool.map(
                    lambda t: scrape_node(t[0], t[1], self.utilisation, self.timeout, client),
                    targets,
                )
            )
        for scraped in done:
            self.on_scrape(scraped.outcome)
        return done

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.scrape_all()
            except Exception:  # never let the thread die: the next round tries again
                log.exception("dcgm scrape round failed")
            self._stop.wait(self.interval)
