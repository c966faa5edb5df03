"""The audit log: every write request, who made it, and how it ended (append-only).

Revision ID: 0010_audit
Revises: 0009_token_fingerprint
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_audit"
down_revision = "0009_token_fingerprint"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("user", sa.String(length=253), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("tenant", sa.String(length=253), nullable=True),
        sa.Column("method", sa.String(length=8), nullable=False),
        sa.Column("route", sa.String(length=300), nullable=False),
        sa.Column("object", sa.String(length=1000), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=8), nullable=False),
        sa.Column("request_digest", sa.String(length=64), nullable=False),
        sa.Column("after_digest", sa.String(length=64), nullable=True),
        sa.Column("before_digest", sa.String(length=64), nullable=True),
    )
    op.create_index("ix_audit_tenant_id", "audit_log", ["tenant", "id"])
    op.create_index("ix_audit_object", "audit_log", ["object", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_object", table_name="audit_log")
    op.drop_index("ix_audit_tenant_id", table_name="audit_log")
    op.drop_table("audit_log")
