"""allocations.released_as: the state its workload moved to when an allocation was released,
so the attempts that ended in a preemption are known (attained service kept across
requeues, issue #20)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("released_as", sa.String(16), nullable=True))
    # Releases before this revision: a preemption wrote its `workload.preempted` event in the
    # same transaction, at the same time as the release; other releases stay NULL.
    op.execute(
        "UPDATE allocations SET released_as = 'preempted' "
        "WHERE released_at IS NOT NULL AND EXISTS (SELECT 1 FROM events e "
        "WHERE e.workload_id = allocations.workload_id AND e.kind = 'workload.preempted' "
        "AND e.at = allocations.released_at)"
    )


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("released_as")
