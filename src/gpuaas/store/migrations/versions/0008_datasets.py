"""Datasets a tenant registers, and which nodes hold a warm cache of each.

Revision ID: 0008_datasets
Revises: 0007_clusters
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_datasets"
down_revision = "0007_clusters"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "tenant_id",
            sa.Integer(),
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("runtime", sa.String(length=16), nullable=False),
        sa.Column("cache_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("tenant_id", "name", name="uq_dataset_name"),
    )
    op.create_table(
        "dataset_caches",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "dataset_id",
            sa.Integer(),
            sa.ForeignKey("datasets.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("warm_at", sa.Float(), nullable=True),
        sa.Column("used_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("dataset_id", "node", name="uq_dataset_cache"),
    )
    op.create_index("ix_dataset_caches_dataset_id", "dataset_caches", ["dataset_id"])
    op.create_index("ix_dataset_caches_node", "dataset_caches", ["node"])


def downgrade() -> None:
    op.drop_table("dataset_caches")
    op.drop_table("datasets")
