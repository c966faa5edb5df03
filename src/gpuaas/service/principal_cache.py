"""Authenticated principals for a second: the token query off the submission's hot path.

Authentication used to read the database on every request (one indexed query joining the token,
its user and the user's memberships), so that a revoked token, a disabled user or a removed
member is refused on the very next request. At a thousand submissions a second that query and
the session it needs were the largest part of the request's own CPU (docs/benchmarks.md, "API:
submission speed").

The cache keeps a *valid* principal per token hash (SHA-256 of the token; the token itself is
never held) and answers from it for at most ``ttl`` seconds (1 s by default). What makes that
safe:

- **This process's own identity writes invalidate at once.** A session event marks every
  transaction that inserts, updates or deletes a token, user, membership or tenant (ORM
  objects or bulk ``UPDATE``/``DELETE`` statements); when it commits, the whole cache is
  emptied before the request that made the change is answered. So revoking a token, disabling
  a user or removing a member through this server holds on the next request, as before.
- **Everything else is bounded by ``ttl``**: a change made through another server on the same
  PostgreSQL, or by ``gpuaas`` commands on the database directly, is seen within ``ttl``
  seconds (the documented bound: 1 s).
- **A read never outlives an invalidation.** Each entry is stored only if no invalidation
  happened since the read began (a generation count), so a request that read a token just
  before its revocation committed cannot put the stale principal back.
- **Only successes are cached.** An unknown, revoked or expired token always reads the database,
  so failed authentication is still counted and backed off (:mod:`gpuaas.service.rate_limits`);
  a cached principal past its token's ``expires_at`` is dropped and read again, and a token a
  read finds refused is dropped at once for every request.

**Read again ahead of expiry, by one request.** When an entry simply ran out, every request in
flight for that token missed at once: on PostgreSQL each then took the thread pool and a pooled
connection of its own, 32 concurrent reads of one row and some 20 connections opened and closed
again above the pool's size, every second (docs/benchmarks.md, "PostgreSQL stalls"). Now the
first request to use an entry in the second half of its life is told to read the token again
(``get`` answers it ``None``, once per entry: a *claim*); the others keep the entry until the
new one replaces it or it runs out. Under a steady stream of requests a token is read about
twice a second instead of once and nobody waits for it; the bound is unchanged (an entry is
never answered more than ``ttl`` after its read). Both databases follow the same rule.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker

from gpuaas.service.auth import Principal
from gpuaas.store.tables import Membership, Tenant, Token, User

#: how long a principal is trusted without reading the database (the bound on a revocation made
#: outside this process)
TTL_SECONDS = 1.0
#: the part of an entry's life after which its first user reads the token again (the others
#: keep the entry meanwhile)
REFRESH_AFTER = 0.5
#: beyond this many tokens the cache starts over (a bound on memory, not an eviction policy)
MAX_ENTRIES = 10_000

_IDENTITY = (Token, User, Membership, Tenant)
_IDENTITY_TABLES = frozenset(cls.__table__.name for cls in _IDENTITY)
_CHANGED = "gpuaas.identity_changed"


class _Entry:
    """A cached principal, until when it is trusted, from when its next user reads it again,
    and whether a request has been told to (the claim)."""

    __slots__ = ("claimed", "principal", "refresh_at", "until")

    def __init__(self, principal: Principal, read_at: float, ttl: float) -> None:
        self.principal = principal
        self.until = read_at + ttl
        self.refresh_at = read_at + ttl * REFRESH_AFTER
        self.claimed = False


class PrincipalCache:
    """Token hash -> principal, trusted for ``ttl`` seconds. Thread-safe for the server's event
    loop and its thread pool; ``generation`` moves on every invalidation."""

    def __init__(self, ttl: float = TTL_SECONDS, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.generation = 0
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def get(self, digest: str, now: float) -> Principal | None:
        """The cached principal of a token hash, if still trusted and its token unexpired;
        ``None`` also to the one request chosen to read the token again (see the module): the
        caller reads it and :meth:`put` s the answer, as after a miss. Ask once per request."""
        entry = self._entries.get(digest)
        if entry is None:
            return None
        principal = entry.principal
        clock = time.monotonic()
        if entry.until <= clock or (
            principal.expires_at is not None and principal.expires_at <= now
        ):
            self._entries.pop(digest, None)
            return None
        if clock >= entry.refresh_at and not entry.claimed:
            with self._lock:
                claim = not entry.claimed
                entry.claimed = True
            if claim:
                return None
        return principal

    def put(self, digest: str, principal: Principal, generation: int) -> None:
        """Keep ``principal`` if nothing was invalidated since ``generation`` was read."""
        with self._lock:
            if generation != self.generation:
                return
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[digest] = _Entry(principal, time.monotonic(), self.ttl)

    def drop(self, digest: str) -> None:
        """Forget a token a read found refused (revoked, expired, its user disabled): the
        requests still using its entry are refused from the next one on."""
        self._entries.pop(digest, None)

    def invalidate(self) -> None:
        with self._lock:
            self.generation += 1
            self._entries.clear()

    def watch(self, sessions: sessionmaker[Session]) -> None:
        """Invalidate when a session of ``sessions`` commits a change to identity."""
        event.listen(sessions, "after_flush", _mark_flushed)
        event.listen(sessions, "do_orm_execute", _mark_statement)
        event.listen(sessions, "after_commit", self._after_commit)

    def _after_commit(self, session: Session) -> None:
        # (a mark left by a rolled-back change costs one needless invalidation, never a
        # missed one)
        if session.info.pop(_CHANGED, False):
            self.invalidate()


def _mark_flushed(session: Session, _context: Any) -> None:
    for objects in (session.new, session.dirty, session.deleted):
        if any(isinstance(obj, _IDENTITY) for obj in objects):
            session.info[_CHANGED] = True
            return


def _mark_statement(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete or state.is_insert):
        return
    table = getattr(state.statement, "table", None)
    if table is not None and getattr(table, "name", None) in _IDENTITY_TABLES:
        state.session.info[_CHANGED] = True
