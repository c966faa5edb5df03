"""Tables that page and filter on the server: the API's own pages (``limit``/``after``,
cursor ``next``) and its own filters, so a list of 20,000 jobs costs one page of them.

A :class:`Table` is built from one API list call: the filters it offers are query parameters
the API route takes (passed through as typed; a filter the API refuses shows its message next
to the filter), the pages are the API's cursors ("next page" carries ``after``, "first page"
drops it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from gpuaas.service.console.api import Answer
from gpuaas.service.console.frame import Console

PAGE_SIZE = 50


@dataclass(frozen=True)
class Filter:
    name: str
    label: str
    options: tuple[str, ...] = ()  # a select of these (plus "any"); empty: a text box


@dataclass(frozen=True)
class Cell:
    text: str
    href: str | None = None
    cls: str | None = None
    title: str | None = None


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell]]
    action: str
    filters: list[Filter] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    next_href: str | None = None
    first_href: str | None = None
    empty: str = "Nothing here yet."
    caption: str = ""
    items: list[dict[str, Any]] = field(default_factory=list)


async def api_table(
    c: Console,
    path: str,
    columns: list[str],
    row: Callable[[dict[str, Any]], list[Cell]],
    *,
    filters: list[Filter] | None = None,
    fixed: dict[str, Any] | None = None,
    limit: int = PAGE_SIZE,
    empty: str = "Nothing here yet.",
    caption: str = "",
) -> Table:
    """One page of ``path`` as a table, filtered by the request's query parameters."""
    query = c.request.query_params
    filters = filters or []
    values = {f.name: query.get(f.name, "") for f in filters}
    after = query.get("after") or None
    params = {**{k: v for k, v in values.items() if v}, **(fixed or {})}
    answer: Answer = await c.api.get(path, limit=limit, after=after, **params)
    base = c.request.url.path
    table = Table(
        columns,
        [],
        base,
        filters,
        values,
        empty=empty,
        caption=caption,
    )
    if not answer.ok:
        names = {f.name for f in filters}
        for fld, message in answer.field_errors:
            if fld in names:
                table.errors[fld] = message
        table.error = answer.detail
        return table
    table.items = answer.items()
    table.rows = [row(item) for item in table.items]
    kept = {k: v for k, v in values.items() if v}
    if answer.next:
        table.next_href = base + "?" + urlencode({**kept, "after": answer.next})
    if after:
        table.first_href = base + ("?" + urlencode(kept) if kept else "")
    return table
