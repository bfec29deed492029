"""usage.gpu_seconds_estimated: the GPU-seconds of a row whose busy fraction telemetry
estimated (an MPS share's split of its GPU's MPS work, docs/telemetry.md "Busy time under
MPS") rather than measured; not counted in gpu_seconds_measured

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.add_column(
            sa.Column("gpu_seconds_estimated", sa.Float(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("gpu_seconds_estimated")
