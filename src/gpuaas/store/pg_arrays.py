"""Many rows in one PostgreSQL statement whose text does not depend on how many.

The hot writes (the submissions' group commit, the audit log's batches, the reconciler's
pending reasons) store tens to hundreds of rows at once. Through SQLAlchemy an ``executemany``
reaches PostgreSQL as one statement per row (psycopg's pipeline: a parse, bind and execute
each, measured at about one statement per submission for the events and again for the audit
entries), and a multi-row ``VALUES`` has a text that changes with the row count, so psycopg
converts it anew every time (its query cache keeps short texts only), PostgreSQL plans it anew,
and it is never prepared.

Here a batch goes as one array per column, ``unnest(%s::T1[], %s::T2[], ...)``: one statement
whatever the batch's size, a text that never changes (psycopg converts it once; from its fifth
use on a connection, ``prepare_threshold``, PostgreSQL runs it as a prepared statement), and no
SQLAlchemy compilation per batch. It runs on the DBAPI cursor of the session's own connection,
inside the session's transaction: the session's commit commits it.

Values go as SQLAlchemy would have sent them: a JSON column's value as ``json.dumps`` of it
(Python's ``None`` is JSON ``null`` there, as SQLAlchemy's ``JSON`` stores it by default),
everything else as is, cast by the column's own type.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Table
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

_DIALECT = postgresql.dialect()


def quoted(name: str) -> str:
    """A column or table name as PostgreSQL must read it (``user`` is a keyword)."""
    return str(_DIALECT.identifier_preparer.quote(name))


def unnest_rows(
    table: Table, columns: Sequence[str], alias: str = "v", ordinality: bool = False
) -> str:
    """``unnest(%s::T1[], ...) AS v(c1, ...)``: the rows of :func:`column_arrays`, typed as
    ``table``'s columns; with ``ordinality``, a last column ``ordinality``, the row's place
    (from 1)."""
    casts = ", ".join(f"%s::{table.c[name].type.compile(dialect=_DIALECT)}[]" for name in columns)
    names = [quoted(name) for name in columns]
    if ordinality:
        return f"unnest({casts}) WITH ORDINALITY AS {alias}({', '.join(names)}, ordinality)"
    return f"unnest({casts}) AS {alias}({', '.join(names)})"


def column_arrays(
    table: Table, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]
) -> list[list[Any]]:
    """One list per column, in ``columns``' order, of the rows' values (JSON ones rendered)."""
    rows = list(rows)
    out = []
    for name in columns:
        if isinstance(table.c[name].type, JSON):
            out.append([json.dumps(row[name]) for row in rows])
        else:
            out.append([row[name] for row in rows])
    return out


def driver_cursor(session: Session) -> Any:
    """A psycopg cursor on the session's connection, in the session's transaction."""
    return session.connection().connection.cursor()
