"""Job events keep their reason's code beside the sentence, so a client (the console, an alert)
can act on why a job moved without reading the sentence.

Events written before keep an empty code.

Revision ID: 0005_event_codes
Revises: 0004_reasons
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_event_codes"
down_revision = "0004_reasons"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_events") as batch:
        batch.add_column(
            sa.Column("reason_code", sa.String(length=64), nullable=False, server_default="")
        )


def downgrade() -> None:
    with op.batch_alter_table("job_events") as batch:
        batch.drop_column("reason_code")
