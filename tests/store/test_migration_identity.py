"""0002_identity scopes the tokens that exist at the upgrade: each keeps what its user had at the
upgrade (its current meaning) and never gains a role given later (SQLite and PostgreSQL)."""

from __future__ import annotations

import time

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from gpuaas.service.auth import Role, fingerprint, hash_token, load_principal
from gpuaas.store.db import Database, normalise_url, upgrade

OLD = "gpa_token-from-before-the-upgrade-0123"


def test_existing_tokens_keep_their_roles_at_the_upgrade_and_gain_none(db_url: str) -> None:
    upgrade(db_url, "0001")
    engine = create_engine(normalise_url(db_url), poolclass=NullPool)
    with engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO tenants (id, name, display_name, capacity, created_at)"
                " VALUES (1, 'acme', '', '{}', 0), (2, 'globex', '', '{}', 0)"
            )
        )
        c.execute(
            text(
                "INSERT INTO users (id, name, display_name, disabled, created_at)"
                " VALUES (1, 'bob', '', false, 0), (2, 'nobody', '', false, 0)"
            )
        )
        c.execute(
            text(
                "INSERT INTO memberships (id, user_id, tenant_id, role, created_at)"
                " VALUES (1, 1, 1, 'tenant-admin', 0), (2, 1, NULL, 'viewer', 0)"
            )
        )
        c.execute(
            text("INSERT INTO tokens (id, user_id, name, prefix, token_hash, created_at, revoked)"
                 " VALUES (1, 1, 'old', 'gpa_toke', :h, 0, false),"
                 " (2, 2, 'none', 'gpa_none', :h2, 0, false)"),
            {"h": hash_token(OLD), "h2": hash_token(OLD + "x")},
        )  # fmt: skip
    engine.dispose()
    upgrade(db_url)
    db = Database(db_url)
    try:
        with db.engine.connect() as c:  # 0009: the stored prefixes became fingerprints
            kept = dict(c.execute(text("SELECT id, prefix FROM tokens")).all())
            assert kept == {1: fingerprint(OLD), 2: fingerprint(OLD + "x")}
            p = load_principal(c, OLD, time.time())
            assert p is not None and p.tenant_id is None
            assert p.platform_role is Role.VIEWER and p.tenant_roles == {1: Role.TENANT_ADMIN}
            nobody = load_principal(c, OLD + "x", time.time())
            assert nobody is not None and nobody.tenant_roles == {} and nobody.platform_role is None
        with db.engine.begin() as c:  # later grants: globex, and provider-admin
            c.execute(
                text(
                    "INSERT INTO memberships (id, user_id, tenant_id, role, created_at)"
                    " VALUES (3, 1, 2, 'tenant-admin', 1)"
                )
            )
            c.execute(text("UPDATE memberships SET role = 'provider-admin' WHERE id = 2"))
        with db.engine.connect() as c:
            p = load_principal(c, OLD, time.time())
            assert p is not None
            assert p.platform_role is Role.VIEWER and p.tenant_roles == {1: Role.TENANT_ADMIN}
    finally:
        db.dispose()
