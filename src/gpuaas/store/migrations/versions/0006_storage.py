"""Storage: tenants' volumes and the per-tenant storage quota (gpuaas.service.storage).

Revision ID: 0006_storage
Revises: 0005_event_codes
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_storage"
down_revision = "0005_event_codes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("storage_quota", sa.BigInteger(), nullable=True))
    op.create_table(
        "volumes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("cluster", sa.String(length=63), nullable=False),
        sa.Column("size", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("storage_class", sa.String(length=253), nullable=False),
        sa.Column("access_mode", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("reason_code", sa.String(length=64), nullable=False),
        sa.Column("reason_fields", sa.JSON(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("claim", sa.String(length=253), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "name", name="uq_volume_name"),
    )
    op.create_index(op.f("ix_volumes_tenant_id"), "volumes", ["tenant_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_volumes_tenant_id"), table_name="volumes")
    op.drop_table("volumes")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("storage_quota")
