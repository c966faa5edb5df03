"""Tokens keep a fingerprint (the first 8 hex digits of their SHA-256), not their first 8
characters: a stored prefix was half of a 16-character operator-chosen admin token.

Revision ID: 0009_token_fingerprint
Revises: 0008_datasets
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_token_fingerprint"
down_revision = "0008_datasets"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(sa.text("UPDATE tokens SET prefix = substr(token_hash, 1, 8)"))


def downgrade() -> None:
    """The old prefixes are gone for good (that was the point); the fingerprints stay."""
