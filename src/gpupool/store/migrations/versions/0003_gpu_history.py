"""GPU history in the store: per-minute and hourly rows per GPU

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_history",
        sa.Column("gpu_uuid", sa.String(length=128), nullable=False),
        sa.Column("resolution_s", sa.Integer(), nullable=False),
        sa.Column("t", sa.BigInteger(), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("util", sa.Float(), nullable=True),
        sa.Column("util_max", sa.Float(), nullable=True),
        sa.Column("memory_mib", sa.Float(), nullable=True),
        sa.Column("memory_mib_max", sa.Float(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("temperature_c", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("gpu_uuid", "resolution_s", "t", name=op.f("pk_gpu_history")),
    )
    with op.batch_alter_table("gpu_history", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_history_resolution_t", ["resolution_s", "t"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("gpu_history", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_history_resolution_t")
    op.drop_table("gpu_history")
