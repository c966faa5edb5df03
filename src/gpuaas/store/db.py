"""The database handle: engine, sessions, migrations, and the leader lock.

SQLite (the default, a file in the data directory) runs in WAL mode with ``synchronous=NORMAL``:
a committed transaction survives the process being killed, which is what the service promises
for an acknowledged submission. PostgreSQL is reached through psycopg 3.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from gpuaas.model.errors import InvalidValue
from gpuaas.store import sqlite_trace
from gpuaas.store.checkpointer import FALLBACK_PAGES, Checkpointer, Checkpoints

MIGRATIONS = Path(__file__).with_name("migrations")

#: The PostgreSQL advisory lock key the leader holds ("gpuaas" in ASCII, as an int).
LEADER_LOCK_KEY = 0x677075616173


def normalise_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` for psycopg 3; reject other drivers by name."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise InvalidValue("--db", f"not a database URL: {url!r}") from exc
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend != "sqlite":
        raise InvalidValue("--db", f"unsupported database {backend!r} (use sqlite or postgresql)")
    return parsed.render_as_string(hide_password=False)


#: each engine's URL as text (rendering a URL took three calls a submission ~2 % of its CPU)
_WHERE: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()


def where(session: Session) -> str:
    """``str(session.get_bind().url)``, remembered per engine: the key the per-database caches
    of the request path (governance, submission bounds, job limits) are kept under."""
    bind = session.get_bind()
    found = _WHERE.get(bind)  # type: ignore[call-overload]
    if found is None:
        found = _WHERE[bind] = str(bind.url)  # type: ignore[index]
    return found


class Database:
    """One engine and its session factory for the whole process.

    ``checkpoints``: who checkpoints a SQLite file's WAL; the API server, whose commits
    requests wait for, does it in a thread of its own (:mod:`gpuaas.store.checkpointer`)."""

    def __init__(self, url: str, checkpoints: Checkpoints = Checkpoints.IN_COMMITS) -> None:
        self.url = normalise_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        self.checkpointer: Checkpointer | None = None
        if self.is_sqlite:
            ensure_directory(self.url)
            connect_args: dict[str, object] = {"check_same_thread": False, "timeout": 30}
            if sqlite_trace.enabled():  # a debug trace of write transactions (its module)
                connect_args["factory"] = sqlite_trace.TracingConnection
            self.engine: Engine = create_engine(
                self.url,
                connect_args=connect_args,
                pool_size=8,
                max_overflow=32,
            )
            database = make_url(self.url).database
            autocheckpoint = 1000  # SQLite's default
            if checkpoints is not Checkpoints.IN_COMMITS and database not in (None, "", ":memory:"):
                autocheckpoint = FALLBACK_PAGES
                if checkpoints is Checkpoints.THREAD:
                    self.checkpointer = Checkpointer(str(Path(database).expanduser()))
            event.listen(self.engine, "connect", _SqlitePragmas(autocheckpoint))
            if self.checkpointer is not None:
                self.checkpointer.start()
        else:
            self.engine = create_engine(self.url, pool_size=10, max_overflow=30, pool_pre_ping=True)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on any error."""
        with self.sessions() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def upgrade(self) -> None:
        """Apply every Alembic migration not yet applied (idempotent)."""
        upgrade(self.url)

    def dispose(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.stop()
        self.engine.dispose()


class _SqlitePragmas:
    """Each new SQLite connection's settings; ``autocheckpoint``: the WAL's pages past which a
    commit checkpoints (:mod:`gpuaas.store.checkpointer`)."""

    def __init__(self, autocheckpoint: int) -> None:
        self.autocheckpoint = int(autocheckpoint)

    def __call__(self, dbapi_connection: object, _record: object) -> None:
        cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA wal_autocheckpoint={self.autocheckpoint}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()


def ensure_directory(url: str) -> None:
    """SQLite creates the file but not its directory: create the data directory first, 0700,
    and the database file 0600 (SQLite gives its -wal and -shm files the database's mode), so
    tokens' hashes and tenants' jobs are not readable by other users of the machine. An
    existing directory or file keeps the mode its owner gave it."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database).expanduser()
        try:
            missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
            for directory in reversed(missing):  # mkdir(parents=True) ignores mode for parents
                directory.mkdir(mode=0o700, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        except OSError as exc:
            raise InvalidValue("--db", f"cannot create {path}: {exc}") from exc


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision``; the migrations use their own engine."""
    config = alembic_config(url)
    ensure_directory(normalise_url(url))
    engine = create_engine(normalise_url(url), poolclass=NullPool)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def current_revision(url: str) -> str | None:
    engine = create_engine(normalise_url(url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            try:
                return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
            except Exception:
                return None
    finally:
        engine.dispose()
