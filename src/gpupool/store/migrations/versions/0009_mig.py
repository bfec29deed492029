"""MIG: gpus.mig_layout, the `mig` request field of workloads and profiles, and the MIG
instance (profile, start) of a share

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        batch.add_column(sa.Column("mig_layout", sa.String(255), nullable=True))
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("mig", sa.String(32), nullable=True))
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("mig", sa.String(32), nullable=True))
    with op.batch_alter_table("shares") as batch:
        batch.add_column(sa.Column("mig_profile", sa.String(32), nullable=True))
        batch.add_column(sa.Column("mig_start", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("shares") as batch:
        batch.drop_column("mig_start")
        batch.drop_column("mig_profile")
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("mig")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("mig")
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("mig_layout")
