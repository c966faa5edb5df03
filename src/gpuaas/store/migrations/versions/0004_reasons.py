"""Structured reasons: a job's reason code and fields beside its sentence
(gpuaas.engine.reasons).

Rows written before keep an empty code; the API then derives the code from the job's state.

Revision ID: 0004_reasons
Revises: 0003_tenancy
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_reasons"
down_revision = "0003_tenancy"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("reason_code", sa.String(length=64), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("reason_fields", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in ("reason_fields", "reason_code"):
            batch.drop_column(column)
