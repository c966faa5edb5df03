"""Finding identity rows by the names the API speaks, and committing an identity write.

A name holding a NUL byte is never stored (PostgreSQL refuses it even in a query), so it is
answered as "not found" before the database is asked.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.service.errors import not_found
from gpuaas.store.tables import Invitation, Membership, Tenant, User

#: The largest id the database's 64-bit id columns hold; a larger one names no row.
MAX_ID = 2**63 - 1


def find_user(session: Session, name: str) -> User | None:
    if "\x00" in name:
        return None
    return session.scalar(select(User).where(User.name == name))


def user_by_name(session: Session, name: str) -> User:
    """The user ``name``, or 404."""
    user = find_user(session, name)
    if user is None:
        raise not_found(f"user {name}")
    return user


def tenant_by_name(session: Session, name: str) -> Tenant:
    """The tenant ``name`` whoever asks (callers authorize first), or 404."""
    tenant = None
    if "\x00" not in name:
        tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise not_found(f"tenant {name}")
    return tenant


def user_names(session: Session, ids: Iterable[int]) -> dict[int, str]:
    """``{user id: name}`` for ``ids`` (one query)."""
    return dict(session.execute(select(User.id, User.name).where(User.id.in_(list(ids)))).all())


def tenant_names(session: Session, ids: Iterable[int]) -> dict[int, str]:
    """``{tenant id: name}`` for ``ids`` (one query)."""
    rows = session.execute(select(Tenant.id, Tenant.name).where(Tenant.id.in_(list(ids))))
    return dict(rows.all())


def membership(session: Session, tenant: Tenant, user: User) -> Membership | None:
    return session.scalar(
        select(Membership).where(Membership.tenant_id == tenant.id, Membership.user_id == user.id)
    )


def invitation(session: Session, tenant: Tenant, user: User) -> Invitation | None:
    return session.scalar(
        select(Invitation).where(Invitation.tenant_id == tenant.id, Invitation.user_id == user.id)
    )


def commit_here(session: Session) -> None:
    """Commit in the caller's own worker thread, before the route returns to the event loop.

    On SQLite the job submission runs its write on the event loop; had this write left its lock
    held until the session dependency commits (a step the event loop schedules), a submission
    arriving meanwhile would wait for a lock whose release waits for it, for the whole busy
    timeout. Identity writes (a revocation above all) must not stall behind submissions.
    """
    session.commit()
