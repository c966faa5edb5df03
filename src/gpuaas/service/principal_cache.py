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
  a cached principal past its token's ``expires_at`` is dropped and read again.
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
#: beyond this many tokens the cache starts over (a bound on memory, not an eviction policy)
MAX_ENTRIES = 10_000

_IDENTITY = (Token, User, Membership, Tenant)
_IDENTITY_TABLES = frozenset(cls.__table__.name for cls in _IDENTITY)
_CHANGED = "gpuaas.identity_changed"


class PrincipalCache:
    """Token hash -> (principal, trusted until). Thread-safe for the server's event loop and
    its thread pool; ``generation`` moves on every invalidation."""

    def __init__(self, ttl: float = TTL_SECONDS, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.generation = 0
        self._entries: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    def get(self, digest: str, now: float) -> Principal | None:
        """The cached principal of a token hash, if still trusted and its token unexpired."""
        found = self._entries.get(digest)
        if found is None:
            return None
        principal, until = found
        if until <= time.monotonic() or (
            principal.expires_at is not None and principal.expires_at <= now
        ):
            self._entries.pop(digest, None)
            return None
        return principal

    def put(self, digest: str, principal: Principal, generation: int) -> None:
        """Keep ``principal`` if nothing was invalidated since ``generation`` was read."""
        with self._lock:
            if generation != self.generation:
                return
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[digest] = (principal, time.monotonic() + self.ttl)

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
