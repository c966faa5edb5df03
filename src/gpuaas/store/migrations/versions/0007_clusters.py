"""Tenant clusters: the clusters, the nodes carved into them (a node in at most one: the
primary key), their events, and what the provider lets each tenant carve.

Revision ID: 0007_clusters
Revises: 0006_storage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_clusters"
down_revision = "0006_storage"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("reason_code", sa.String(length=64), nullable=False),
        sa.Column("reason_fields", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "name", name="uq_cluster_name"),
    )
    op.create_table(
        "cluster_nodes",
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("releasing", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("node"),
    )
    with op.batch_alter_table("cluster_nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_cluster_nodes_cluster_id"), ["cluster_id"])
    op.create_table(
        "cluster_events",
        sa.Column("id", _ID, nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("reason_code", sa.String(length=64), nullable=False),
        sa.Column("reason_fields", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("cluster_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_cluster_events_cluster_id"), ["cluster_id"])
    op.create_table(
        "cluster_allowances",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("pools", sa.JSON(), nullable=False),
        sa.Column("node_limit", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("tenant_id"),
    )


def downgrade() -> None:
    op.drop_table("cluster_allowances")
    op.drop_table("cluster_events")
    op.drop_table("cluster_nodes")
    op.drop_table("clusters")
