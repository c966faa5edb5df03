"""Many rows in one PostgreSQL statement whose text does not depend on how many.

The hot writes (the submissions' group commit, the audit log's batches, the reconciler's
pending reasons) store tens to hundreds of rows at once. Through SQLAlchemy an ``executemany``
reaches PostgreSQL as one statement per row (psycopg's pipeline: a parse, bind and execute
each, measured at about one statement per submission for the events and again for the audit
entries), and a multi-row ``VALUES`` has a text that changes with the row count, so psycopg
converts it anew every time (its query cache keeps short texts only), PostgreSQL plans it anew,
and it is never prepared.

Here a batch goes as **one parameter**, the rows as a JSON array rendered by ``json.dumps`` (C
code, one call), read back by ``json_to_recordset`` with each column's own type: one statement
whatever the batch's size, a text that never changes (psycopg converts it once; from its fifth
use on a connection, ``prepare_threshold``, PostgreSQL runs it as a prepared statement), and no
SQLAlchemy compilation per batch. (One array per column, ``unnest``, was tried first: psycopg
dumps arrays element by element in Python, 2.5 % of the server's samples under ``bench api``.)
It runs on the DBAPI cursor of the session's own connection, inside the session's transaction:
the session's commit commits it.

Values are stored as SQLAlchemy would have stored them: floats exactly (``repr`` round-trips),
a JSON column's value as the same ``json.dumps`` text, and Python's ``None`` there as JSON
``null`` (SQLAlchemy's ``JSON`` default), not SQL ``NULL``.
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


def json_rows(table: Table, columns: Sequence[str], alias: str = "r") -> str:
    """``ROWS FROM (json_to_recordset(%s::json) AS (c1 T1, ...)) WITH ORDINALITY AS r(c1, ...,
    ordinality)``: the rows of :func:`rows_param`, typed as ``table``'s columns, with their
    place in the list (from 1)."""
    typed = ", ".join(
        f"{quoted(name)} {table.c[name].type.compile(dialect=_DIALECT)}" for name in columns
    )
    names = ", ".join(quoted(name) for name in columns)
    return (
        f"ROWS FROM (json_to_recordset(%s::json) AS ({typed}))"
        f" WITH ORDINALITY AS {alias}({names}, ordinality)"
    )


def stored(table: Table, columns: Sequence[str], alias: str = "r") -> str:
    """The select list of ``columns`` read from :func:`json_rows`, a JSON column's ``null``
    kept as JSON ``null`` (``json_to_recordset`` reads it as SQL ``NULL``)."""
    return ", ".join(
        f"COALESCE({alias}.{quoted(name)}, 'null'::json)"
        if isinstance(table.c[name].type, JSON)
        else f"{alias}.{quoted(name)}"
        for name in columns
    )


def rows_param(rows: Iterable[Mapping[str, Any]]) -> str:
    """The rows (dicts keyed by column; other keys are ignored) as :func:`json_rows` reads
    them."""
    return json.dumps(rows if isinstance(rows, list) else list(rows))


def driver_cursor(session: Session) -> Any:
    """A psycopg cursor on the session's connection, in the session's transaction."""
    return session.connection().connection.cursor()
