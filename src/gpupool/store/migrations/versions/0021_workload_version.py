"""workloads.version: a count of the writes of a workload's domain columns, raised by a
trigger on every UPDATE that sets one of them (not by the why-pending and forecast notes), so
the scheduler loop reads the full row only of workloads whose version moved

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

#: the domain columns of `workloads` at this revision (store.rows.DOMAIN_KEYS;
#: tests/store/test_workload_version.py holds the two equal: a column added later must be
#: added to the trigger by its own migration)
DOMAIN_COLUMNS = (
    "id", "name", "tenant", "owner", "kind", "state", "gpus", "gpu_milli", "gpu_memory_mib",
    "gpu_model", "cpu_milli", "memory_mib", "mig", "nodes", "engine", "node_labels",
    "priority", "preemptible", "requeue_on_preemption", "checkpointing", "max_runtime_s",
    "submitted_at", "command", "profile", "admitted_at", "started_at", "finished_at",
    "exit_code", "reason", "preemptions", "executor_ref", "stop_state", "stop_reason",
    "stop_requested_at", "start_attempts", "retry_at", "endpoint",
)  # fmt: skip
TRIGGER = "workloads_version"


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="0"))
    cols = ", ".join(DOMAIN_COLUMNS)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION workloads_version_up() RETURNS trigger AS $$ "
            "BEGIN NEW.version := OLD.version + 1; RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        op.execute(
            f"CREATE TRIGGER {TRIGGER} BEFORE UPDATE OF {cols} ON workloads "
            "FOR EACH ROW EXECUTE FUNCTION workloads_version_up()"
        )
    else:  # SQLite: the trigger's own UPDATE sets no listed column, so it does not recurse
        op.execute(
            f"CREATE TRIGGER {TRIGGER} AFTER UPDATE OF {cols} ON workloads FOR EACH ROW "
            "BEGIN UPDATE workloads SET version = OLD.version + 1 WHERE id = NEW.id; END"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER {TRIGGER} ON workloads")
        op.execute("DROP FUNCTION workloads_version_up()")
    else:
        op.execute(f"DROP TRIGGER {TRIGGER}")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("version")
