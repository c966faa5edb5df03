"""Storage metering: how far each volume's GB-hours are recorded.

Revision ID: 0015_billing
Revises: 0014_invoicing
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_billing"
down_revision = "0014_invoicing"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("volumes") as batch:
        batch.add_column(sa.Column("metered_until", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("volumes") as batch:
        batch.drop_column("metered_until")
