"""Identity that cannot be stretched: token scopes, tokens minted in a tenant, invitations,
membership ids never reused (SQLite).

Existing tokens are scoped sensibly: each gets the memberships its user has at the upgrade, with
their roles then as ceilings. It keeps doing what it did the moment before the upgrade, and never
gains a role given to its user later (nor answers for a tenant the user joins again later). They
stay personal tokens (``tenant_id`` NULL): which tenant a token was minted in was not recorded.

Revision ID: 0002_identity
Revises: 0001
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0002_identity"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "invitations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("invited_by", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "user_id", name="uq_invitation"),
    )
    with op.batch_alter_table("invitations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_invitations_user_id"), ["user_id"], unique=False)

    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tenant_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("scope", sa.JSON(), nullable=True))
        batch_op.create_index(batch_op.f("ix_tokens_tenant_id"), ["tenant_id"], unique=False)
        batch_op.create_foreign_key(
            "fk_tokens_tenant_id_tenants", "tenants", ["tenant_id"], ["id"], ondelete="CASCADE"
        )

    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        # never reuse a membership id (tokens name memberships by id); PostgreSQL's sequences
        # never do
        with op.batch_alter_table(
            "memberships", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass
    scopes: dict[int, dict[str, str]] = {}
    for membership_id, user_id, role in bind.execute(
        sa.text("SELECT id, user_id, role FROM memberships")
    ):
        scopes.setdefault(user_id, {})[str(membership_id)] = role
    tokens = list(bind.execute(sa.text("SELECT id, user_id FROM tokens")))
    for token_id, user_id in tokens:
        bind.execute(
            sa.text("UPDATE tokens SET scope = :scope WHERE id = :id"),
            {"scope": json.dumps(scopes.get(user_id, {})), "id": token_id},
        )
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.alter_column("scope", existing_type=sa.JSON(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_constraint("fk_tokens_tenant_id_tenants", type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_tokens_tenant_id"))
        batch_op.drop_column("scope")
        batch_op.drop_column("tenant_id")

    with op.batch_alter_table("invitations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_invitations_user_id"))
    op.drop_table("invitations")
