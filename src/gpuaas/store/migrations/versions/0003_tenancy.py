"""Tenancy terms: a tenant's parent cohort, borrowing and lending limits, maximum job size and
priority ceiling (gpuaas.service.tenancy).

Revision ID: 0003_tenancy
Revises: 0002_identity
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_tenancy"
down_revision = "0002_identity"
branch_labels = None
depends_on = None

_EMPTY = sa.text("'{}'")


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("parent_cohort", sa.String(length=253), nullable=True))
        batch.add_column(sa.Column("borrowing", sa.JSON(), nullable=False, server_default=_EMPTY))
        batch.add_column(sa.Column("lending", sa.JSON(), nullable=False, server_default=_EMPTY))
        batch.add_column(sa.Column("max_job", sa.JSON(), nullable=False, server_default=_EMPTY))
        batch.add_column(sa.Column("priority_ceiling", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        for column in ("priority_ceiling", "max_job", "lending", "borrowing", "parent_cohort"):
            batch.drop_column(column)
