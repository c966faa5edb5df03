"""Invoicing: closed invoices and their lines, budgets and what they fired.

Revision ID: 0014_invoicing
Revises: 0013_metering (re-chained after merging metering; on main the lead chains it)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_invoicing"
down_revision = "0013_metering"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "invoices",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("period", sa.String(length=7), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.Column("closed_at", sa.Float(), nullable=False),
        sa.Column("closed_by", sa.String(length=100), nullable=False),
        sa.UniqueConstraint("tenant", "period", name="uq_invoice_period"),
    )
    op.create_table(
        "invoice_lines",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("period", sa.String(length=7), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("sku", sa.String(length=200), nullable=False),
        sa.Column("price_id", sa.Integer(), nullable=True),
        sa.Column("quantity", sa.BigInteger(), nullable=False),
        sa.Column("unit", sa.String(length=32), nullable=False),
        sa.Column("list_cost", sa.BigInteger(), nullable=False),
        sa.Column("contracted_cost", sa.BigInteger(), nullable=False),
        sa.Column("billed_cost", sa.BigInteger(), nullable=False),
        sa.Column("for_period", sa.String(length=7), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=100), nullable=False),
    )
    op.create_index("ix_invoice_lines_tenant_period", "invoice_lines", ["tenant", "period"])
    op.create_table(
        "budgets",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "tenant_id",
            sa.Integer(),
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("scope_kind", sa.String(length=16), nullable=False),
        sa.Column("scope", sa.String(length=253), nullable=False),
        sa.Column("scope_key", sa.String(length=253), nullable=False),
        sa.Column("period", sa.String(length=16), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("thresholds", sa.JSON(), nullable=False),
        sa.Column("hard", sa.Boolean(), nullable=False),
        sa.Column("stop_running", sa.Boolean(), nullable=False),
        sa.Column("max_rate_per_hour", sa.BigInteger(), nullable=True),
        sa.Column("webhook", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("tenant_id", "name", name="uq_budget_name"),
    )
    op.create_table(
        "budget_events",
        sa.Column("id", _ID, primary_key=True),
        sa.Column(
            "budget_id",
            sa.Integer(),
            sa.ForeignKey("budgets.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("period", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("threshold", sa.Integer(), nullable=False),
        sa.Column("spent", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("delivered_at", sa.Float(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.UniqueConstraint("budget_id", "period", "kind", "threshold", name="uq_budget_event"),
    )
    op.create_index("ix_budget_events_budget_id", "budget_events", ["budget_id"])


def downgrade() -> None:
    op.drop_table("budget_events")
    op.drop_table("budgets")
    op.drop_index("ix_invoice_lines_tenant_period", table_name="invoice_lines")
    op.drop_table("invoice_lines")
    op.drop_table("invoices")
