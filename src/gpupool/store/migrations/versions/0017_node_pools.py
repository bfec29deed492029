"""node_pools, node_pool_nodes, node_pool_requests: node pools an autoscaler grows and shrinks
(issue 34): each pool's node shape, bounds, boot time and cost; each pool node's state; the
requests for nodes, open and ended

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_pools",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(length=128), nullable=False),
        sa.Column("gpu_memory_mib", sa.Integer(), nullable=False),
        sa.Column("cpu_milli", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("engine", sa.String(length=64), nullable=True),
        sa.Column("min_nodes", sa.Integer(), nullable=False),
        sa.Column("max_nodes", sa.Integer(), nullable=False),
        sa.Column("boot_seconds", sa.Float(), nullable=False),
        sa.Column("cost_per_gpu_hour", sa.Float(), nullable=False),
        sa.Column("idle_seconds", sa.Float(), nullable=False),
        sa.Column("request_timeout_seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_node_pools")),
    )
    op.create_table(
        "node_pool_nodes",
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
        sa.Column("idle_since", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["pool"],
            ["node_pools.name"],
            name=op.f("fk_node_pool_nodes_pool_node_pools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("node", name=op.f("pk_node_pool_nodes")),
    )
    with op.batch_alter_table("node_pool_nodes") as batch:
        batch.create_index(batch.f("ix_node_pool_nodes_pool"), ["pool"], unique=False)
    op.create_table(
        "node_pool_requests",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("for_workloads", sa.JSON(), nullable=False),
        sa.Column("atomic", sa.Boolean(), nullable=False),
        sa.Column("requested_at", sa.Float(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("engine_ref", sa.String(length=253), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["pool"],
            ["node_pools.name"],
            name=op.f("fk_node_pool_requests_pool_node_pools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_pool_requests")),
    )
    with op.batch_alter_table("node_pool_requests") as batch:
        batch.create_index(batch.f("ix_node_pool_requests_pool"), ["pool"], unique=False)
        batch.create_index(batch.f("ix_node_pool_requests_state"), ["state"], unique=False)


def downgrade() -> None:
    op.drop_table("node_pool_requests")
    op.drop_table("node_pool_nodes")
    op.drop_table("node_pools")
