"""Budget alerts' webhooks: POSTed from a thread of their own, retried, never blocking.

:meth:`WebhookSender.send` only queues (the reconciler's cycle never waits on a receiver).
The thread POSTs each alert as JSON (``BudgetAlert``: tenant, budget, scope, period,
threshold, amount, spent, message), retrying a failure (an error, a timeout, a status >= 300)
up to :data:`ATTEMPTS` times with a doubling delay; each attempt is written on the alert's
:class:`~gpuaas.store.tables.BudgetEvent` row (``attempts``, ``error``, ``delivered_at``), so
the tenant-admin sees in the budget's view whether its receiver got it. An alert left
undelivered when the process stopped is sent again by the next leader
(:meth:`WebhookSender.resume`): delivery is at least once, firing is exactly once.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

import httpx
from sqlalchemy import select, update

from gpuaas.store.db import Database
from gpuaas.store.tables import BudgetEvent, BudgetRow, Tenant

log = logging.getLogger("gpuaas.webhooks")
ATTEMPTS = 5
FIRST_DELAY = 0.5
TIMEOUT = 5.0


class WebhookSender:
    def __init__(self, db: Database, first_delay: float = FIRST_DELAY) -> None:
        self.db = db
        self.first_delay = first_delay
        self._queue: queue.Queue[tuple[int, str, dict[str, Any], int] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def send(self, event_id: int, url: str, payload: dict[str, Any]) -> None:
        """Queue one alert for ``url`` (returns at once)."""
        self._start()
        self._queue.put((event_id, url, payload, 0))

    def resume(self) -> None:
        """Queue the alerts recorded but not delivered (a previous leader stopped)."""
        from gpuaas.service.budget_watch import alert

        with self.db.sessions() as session:
            rows = session.execute(
                select(BudgetEvent, BudgetRow, Tenant.name)
                .join(BudgetRow, BudgetRow.id == BudgetEvent.budget_id)
                .join(Tenant, Tenant.id == BudgetRow.tenant_id)
                .where(BudgetEvent.delivered_at.is_(None), BudgetEvent.attempts < ATTEMPTS,
                       BudgetRow.webhook != "")
                .order_by(BudgetEvent.id)
            ).all()  # fmt: skip
            queued = [(e.id, b.webhook, alert(b, t, e), e.attempts) for e, b, t in rows]
        for item in queued:
            self._start()
            self._queue.put(item)

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gpuaas-webhooks", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._queue.put(None)  # wakes the thread (only a running one: it takes it)
        self._thread.join(timeout=5)
        self._thread = None

    def _run(self) -> None:
        with httpx.Client(timeout=TIMEOUT) as client:
            while not self._stop.is_set():
                item = self._queue.get()
                if item is None:
                    return
                event_id, url, payload, tried = item
                attempt = tried
                while attempt < ATTEMPTS and not self._stop.is_set():
                    attempt += 1
                    error = _post(client, url, payload)
                    self._record(event_id, attempt, error)
                    if not error:
                        break
                    self._stop.wait(self.first_delay * 2 ** (attempt - 1))

    def _record(self, event_id: int, attempt: int, error: str) -> None:
        values: dict[str, Any] = {"attempts": attempt, "error": error}
        if not error:
            values["delivered_at"] = time.time()
        try:
            with self.db.session() as session:
                session.execute(update(BudgetEvent).where(BudgetEvent.id == event_id)
                                .values(**values))  # fmt: skip
        except Exception:  # the database went away: the next leader resumes it
            log.exception("could not record the delivery of budget event %s", event_id)


def _post(client: httpx.Client, url: str, payload: dict[str, Any]) -> str:
    """'' when delivered, else what went wrong."""
    try:
        response = client.post(url, json=payload)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"[:500]
    if response.status_code >= 300:
        return f"HTTP {response.status_code}"
    return ""
