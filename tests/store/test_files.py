"""The SQLite database and its side files are private to the server's account."""

from __future__ import annotations

import stat

from gpupool.store import open_store


def mode(p) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_new_database_files_are_0600(tmp_path):
    db = tmp_path / "gpupool.db"
    store = open_store(f"sqlite:///{db}")
    try:
        with store.write() as s:
            s.connection().exec_driver_sql("CREATE TABLE IF NOT EXISTS probe (x)")
        side = [p for p in tmp_path.iterdir() if p.name.startswith("gpupool.db")]
        assert {p.name for p in side} >= {"gpupool.db", "gpupool.db-wal", "gpupool.db-shm"}
        assert {p.name: mode(p) for p in side} == {p.name: 0o600 for p in side}
    finally:
        store.close()


def test_existing_world_readable_database_is_fixed_at_open(tmp_path):
    db = tmp_path / "gpupool.db"
    open_store(f"sqlite:///{db}").close()
    for p in tmp_path.iterdir():
        p.chmod(0o644)  # as gpupool made it before
    store = open_store(f"sqlite:///{db}")
    try:
        assert all(mode(p) == 0o600 for p in tmp_path.iterdir() if p.name.startswith("gpupool"))
        assert mode(db) == 0o600
    finally:
        store.close()
