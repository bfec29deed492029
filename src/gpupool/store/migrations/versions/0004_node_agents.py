"""node agents: node credentials and the latest report of each node

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.Column("last_used_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_node_tokens_token_hash")),
    )
    with op.batch_alter_table("node_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_node_tokens_node"), ["node"], unique=False)

    op.create_table(
        "node_reports",
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("received_at", sa.Float(), nullable=False),
        sa.Column("interval_s", sa.Float(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("state_before_lost", sa.String(length=16), nullable=True),
        sa.ForeignKeyConstraint(
            ["node"], ["nodes.name"], name=op.f("fk_node_reports_node_nodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("node", name=op.f("pk_node_reports")),
    )


def downgrade() -> None:
    op.drop_table("node_reports")
    with op.batch_alter_table("node_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_node_tokens_node"))
    op.drop_table("node_tokens")
