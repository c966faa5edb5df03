"""Shared by the invoicing tests: a price book entry, budgets written through the service,
a local HTTP receiver for webhooks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpuaas.service.budgets import Budgets
from gpuaas.service.governance_kinds import At
from gpuaas.service.models.budgets import BudgetIn
from gpuaas.store.db import Database
from gpuaas.store.tables import PriceEntryRow, Tenant

H100 = "H100-80GB/whole@on-demand"


def price(db: Database, sku: str = H100, per_hour: int = 3600, name: str = "h100") -> None:
    """A provider price: ``per_hour`` USD per unit-hour (3600: one dollar a second)."""
    with db.session() as s:
        s.add(
            PriceEntryRow(
                book="provider", name=name, sku=sku, list_per_hour=per_hour * 10**9,
                contracted_per_hour=per_hour * 10**9, currency="USD", valid_from=0.0,
                valid_until=None, description="", created_at=0.0, updated_at=0.0,
            )
        )  # fmt: skip


def budget(db: Database, tenant_id: int, update: bool = False, **body: Any) -> dict[str, Any]:
    """Create (or with ``update`` replace) a budget through the service class."""
    with db.session() as s:
        tenant = s.get(Tenant, tenant_id)
        at = At(s, None, tenant)  # type: ignore[arg-type]
        model = BudgetIn.model_validate(body)
        out = Budgets().update(at, body["name"], model) if update else Budgets().create(at, model)
        return out.model_dump(by_alias=True)


class Receiver:
    """A real HTTP server on localhost that records every JSON body POSTed to it; the first
    ``fail_first`` requests get a 500."""

    def __init__(self, fail_first: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refused: list[dict[str, Any]] = []
        self.fail_first = fail_first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if receiver.fail_first > 0:
                    receiver.fail_first -= 1
                    receiver.refused.append(body)
                    self.send_response(500)
                else:
                    receiver.bodies.append(body)
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"


@contextmanager
def receiving(fail_first: int = 0) -> Iterator[Receiver]:
    receiver = Receiver(fail_first)
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
