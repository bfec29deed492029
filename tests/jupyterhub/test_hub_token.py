"""Each start hands JupyterHub a new admin token and revokes the one of the start before
(issue 30, item 10): the hub's tokens do not pile up, live for 30 days each."""

from __future__ import annotations

from gpupool.clock import ManualClock
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.hub.beside import HUB_TOKEN_NAME, hub_token
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import TokenRepo, open_store
from gpupool.system import SystemSettings, build_system


def test_a_start_revokes_the_previous_starts_hub_token(tmp_path):
    clock = ManualClock(1_780_000_000.0)
    store = open_store(f"sqlite:///{tmp_path / 'gpupool.db'}")
    server = Settings(database_url=store.url, start_loops=False)
    system = build_system(
        SystemSettings(server=server, admin="admin", admin_password="pw-123456789"),
        FakeEngine(FakeExecutor(clock)),
        clock=clock,
        store=store,
    )
    try:
        ctx = system.ctx
        # the admin's own notebook token (the spawner names it "jupyterhub") is not the hub's
        own = issue_token(ctx, "admin", "jupyterhub", None)
        first = hub_token(ctx, "admin")
        clock.advance(60)
        second = hub_token(ctx, "admin")  # the next start
        assert first != second
        with store.read() as s:
            tokens = TokenRepo(s).list("admin")
        hub = [t for t in tokens if t.name == HUB_TOKEN_NAME]
        assert len(hub) == 2
        assert [t.revoked_at is None for t in hub] == [False, True]  # oldest first
        assert next(t for t in tokens if t.id == own.id).revoked_at is None
        assert hub[1].expires_at == hub[1].created_at + ctx.settings.token_ttl_s
    finally:
        system.stop()
        store.close()
