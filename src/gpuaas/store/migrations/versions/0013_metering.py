"""Metering: the price book, usage records (append-only), and what each active job holds.

Revision ID: 0013_metering
Revises: 0012_idlepool
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_metering"
down_revision = "0012_idlepool"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "price_entries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("book", sa.String(length=80), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("sku", sa.String(length=200), nullable=False),
        sa.Column("list_per_hour", sa.BigInteger(), nullable=False),
        sa.Column("contracted_per_hour", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("valid_from", sa.Float(), nullable=False),
        sa.Column("valid_until", sa.Float(), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("book", "name", name="uq_price_entry_name"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_price_entries_book_sku", "price_entries", ["book", "sku"])
    op.create_table(
        "usage_records",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("key", sa.String(length=400), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("user", sa.String(length=100), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("cluster", sa.String(length=63), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("pod", sa.String(length=253), nullable=False),
        sa.Column("device", sa.String(length=100), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("sku", sa.String(length=200), nullable=False),
        sa.Column("period", sa.String(length=7), nullable=False),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("end", sa.Float(), nullable=False),
        sa.Column("quantity", sa.BigInteger(), nullable=False),
        sa.Column("price_id", sa.Integer(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("list_cost", sa.BigInteger(), nullable=False),
        sa.Column("effective_cost", sa.BigInteger(), nullable=False),
        sa.Column("utilization", sa.Float(), nullable=True),
        sa.UniqueConstraint("key", name="uq_usage_key"),
    )
    op.create_index("ix_usage_tenant_start", "usage_records", ["tenant", "start"])
    op.create_index("ix_usage_period_sku", "usage_records", ["period", "sku"])
    op.create_index("ix_usage_job", "usage_records", ["job_id"])
    op.create_index("ix_usage_price", "usage_records", ["price_id"])
    op.create_table(
        "usage_open",
        sa.Column("job_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("user", sa.String(length=100), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("cluster", sa.String(length=63), nullable=False),
        sa.Column("held", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("usage_open")
    op.drop_table("usage_records")
    op.drop_index("ix_price_entries_book_sku", table_name="price_entries")
    op.drop_table("price_entries")
