"""usage_energy: joules per workload and UTC day from the GPUs' energy counters, apportioned
by share (issue 35 part 3, chargeback)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_energy",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("workload_id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("user", sa.String(length=128), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("joules", sa.Float(), nullable=False),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_energy")),
        sa.UniqueConstraint("workload_id", "day", name="uq_usage_energy_workload_day"),
    )
    with op.batch_alter_table("usage_energy") as batch:
        batch.create_index(batch.f("ix_usage_energy_workload_id"), ["workload_id"], unique=False)
        batch.create_index(batch.f("ix_usage_energy_tenant"), ["tenant"], unique=False)
        batch.create_index(batch.f("ix_usage_energy_day"), ["day"], unique=False)


def downgrade() -> None:
    op.drop_table("usage_energy")
