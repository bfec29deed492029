"""Login throttling per account and per client address, the bounded password pool, and
password changes (issue 13, items 4 and 9). A ManualClock stands in for time."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from gpupool.server.app import create_app
from gpupool.server.security import PasswordWork
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.server.throttle import ACCOUNT, LoginThrottle, ThrottlePolicy
from tests.server.conftest import API, PASSWORD

WRONG = "not the password"


def login(client, user: str, password: str):
    return client.post(API + "/auth/login", json={"username": user, "password": password})


def fail(world, user: str, times: int, client=None) -> None:
    for _ in range(times):
        assert login(client or world.client, user, WRONG).status_code == 401


def assert_throttled(r, seconds: int, who: str) -> None:
    assert r.status_code == 429, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.headers["retry-after"] == str(seconds)
    body = r.json()
    assert body["retry_after_s"] == seconds and who in body["detail"]
    assert "try again after" in body["detail"] and f"in {seconds} s" in body["detail"]


def test_policy_waits_double_after_the_free_tries_and_drain():
    assert [ACCOUNT.block_s(n) for n in range(1, 9)] == [0, 0, 0, 0, 0, 1, 2, 4]
    assert ACCOUNT.block_s(40) == ACCOUNT.max_s
    assert ACCOUNT.drained(6.0, since=0, now=ACCOUNT.drain_s) == 5.0
    assert ACCOUNT.drained(1.0, since=0, now=10 * ACCOUNT.drain_s) == 0.0


def test_an_account_is_blocked_after_five_failures_with_growing_waits(world):
    fail(world, "ann", 6)  # five free; the sixth blocks for 1 s
    assert_throttled(login(world.client, "ann", WRONG), 1, "user 'ann'")
    # even the right password is not checked while blocked
    assert_throttled(login(world.client, "ann", PASSWORD), 1, "user 'ann'")
    world.clock.advance(1)
    fail(world, "ann", 1)  # the seventh: 2 s
    assert_throttled(login(world.client, "ann", PASSWORD), 2, "user 'ann'")
    world.clock.advance(2)
    assert login(world.client, "ann", PASSWORD).status_code == 200
    fail(world, "ann", 5)  # a success starts the account afresh
    assert login(world.client, "ann", PASSWORD).status_code == 200


def test_refusals_are_answered_after_a_delay_so_clients_cannot_spin(world, monkeypatch):
    import gpupool.server.throttle as throttle

    asked: list[float] = []

    async def sleep(seconds: float) -> None:
        asked.append(seconds)

    monkeypatch.setattr(throttle.asyncio, "sleep", sleep)
    held = world.ctx.login_throttle
    held.refusal_delay_s = 5.0
    fail(world, "ann", 6)
    assert asked == []  # wrong passwords are answered at once
    assert login(world.client, "ann", WRONG).status_code == 429
    assert asked == [1.0]  # never longer than Retry-After (1 s)
    world.clock.advance(1)
    fail(world, "ann", 1)  # blocked for 2 s
    assert login(world.client, "ann", WRONG).status_code == 429
    assert asked == [1.0, 2.0]
    held.refusal_delay_s = throttle.REFUSAL_DELAY_S
    assert login(world.client, "ann", WRONG).status_code == 429
    assert asked == [1.0, 2.0, throttle.REFUSAL_DELAY_S]


def test_other_accounts_log_in_while_one_is_blocked(world):
    fail(world, "ann", 6)
    assert login(world.client, "ann", PASSWORD).status_code == 429
    r = login(world.client, "vic", PASSWORD)
    assert r.status_code == 200 and r.json()["user"]["name"] == "vic"
    # and already-issued tokens keep working
    assert world.get("member", "/auth/me").status_code == 200


def test_failures_drain_with_time(world):
    fail(world, "ann", 5)
    world.clock.advance(ACCOUNT.drain_s)  # one failure forgiven
    fail(world, "ann", 1)
    assert login(world.client, "ann", PASSWORD).status_code == 200


def test_unknown_accounts_are_throttled_like_real_ones(world):
    fail(world, "ghost", 6)
    assert_throttled(login(world.client, "ghost", WRONG), 1, "user 'ghost'")


def test_a_client_address_is_blocked_across_accounts(world):
    strict = ThrottlePolicy(free=3, base_s=10.0, max_s=60.0, drain_s=60.0)
    world.ctx.login_throttle = LoginThrottle(world.ctx.store, world.clock, client=strict)
    for name in ("u1", "u2", "u3", "u4"):  # one try each: no account is blocked
        fail(world, name, 1)
    assert_throttled(login(world.client, "vic", PASSWORD), 10, "your address (testclient)")
    other = TestClient(world.app, client=("10.0.0.7", 4242))
    assert login(other, "vic", PASSWORD).status_code == 200
    world.clock.advance(10)
    assert login(world.client, "vic", PASSWORD).status_code == 200


def test_a_long_forged_client_address_is_counted_not_a_server_error(world):
    other = TestClient(world.app, client=("x" * 5000, 1))
    assert login(other, "ann", WRONG).status_code == 401
    assert login(other, "ann", PASSWORD).status_code == 200


def test_every_process_of_a_server_sees_the_same_blocks(world):
    """Two apps over one database, as the API workers of `gpupool up --workers N` are."""
    settings = Settings(database_url=world.ctx.store.url, start_loops=False)
    twin = create_app(settings, executor=world.executor, clock=world.clock, store=world.ctx.store)
    twin_client = TestClient(twin)
    fail(world, "ann", 3)
    fail(world, "ann", 3, client=twin_client)  # the sixth failure, counted across both
    assert login(world.client, "ann", PASSWORD).status_code == 429
    assert login(twin_client, "ann", PASSWORD).status_code == 429


def test_an_admin_password_reset_lifts_the_block(world):
    fail(world, "ann", 6)
    r = world.patch("admin", "/users/ann", json={"password": "a fresh long password"})
    assert r.status_code == 200, r.text
    assert login(world.client, "ann", "a fresh long password").status_code == 200


@pytest.fixture(params=["no queue", "no wait"])
def held_pool(world, request):
    """A password pool of one thread, its thread held until released; a login finds no
    place in the queue, or a place but no time to wait."""
    queue, wait_s = (0, 2.0) if request.param == "no queue" else (4, 0.0)
    pool = PasswordWork(threads=1, queue=queue, wait_s=wait_s)
    world.ctx.passwords = pool
    release = threading.Event()
    started = threading.Event()

    def hold() -> None:
        started.set()
        release.wait(30)

    pool.admit()
    fut = pool._start(hold)
    assert started.wait(10)
    yield pool
    release.set()
    fut.result(10)
    pool.close()


def test_a_full_password_pool_refuses_logins_with_429_at_once(world, held_pool):
    for _ in range(ACCOUNT.free + 2):
        r = login(world.client, "ann", WRONG)
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert "busy" in r.json()["detail"]
    # a refusal for being busy is not a failed login: nothing is blocked
    throttle = world.ctx.login_throttle
    throttle.check(throttle.keys("ann", "testclient"))
    assert held_pool.taken == 1  # nothing left behind in the queue


def test_authenticated_requests_do_not_wait_for_password_checks(world, held_pool):
    # the only password thread is busy: requests with a token are served regardless
    assert world.get("member", "/auth/me").status_code == 200
    assert world.get("viewer", "/workloads").status_code == 200


# -- password changes ---------------------------------------------------------------------


def test_changing_my_password_needs_the_current_one(world):
    r = world.patch("member", "/users/ann", json={"password": "a new long password"})
    assert r.status_code == 422 and "current_password" in r.json()["detail"]
    r = world.patch(
        "member", "/users/ann", json={"password": "a new long password", "current_password": WRONG}
    )
    assert r.status_code == 403 and "nothing was changed" in r.json()["detail"]
    assert login(world.client, "ann", PASSWORD).status_code == 200  # unchanged


def test_wrong_current_passwords_count_as_failed_logins(world):
    body = {"password": "a new long password", "current_password": WRONG}
    for _ in range(6):
        assert world.patch("member", "/users/ann", json=body).status_code == 403
    assert login(world.client, "ann", PASSWORD).status_code == 429
    r = world.patch("member", "/users/ann", json={**body, "current_password": PASSWORD})
    assert r.status_code == 429


def test_a_new_password_revokes_my_other_tokens_but_not_this_one(world):
    other = issue_token(world.ctx, "ann", "laptop", None).token
    r = world.patch(
        "member",
        "/users/ann",
        json={"password": "a new long password", "current_password": PASSWORD},
    )
    assert r.status_code == 200, r.text
    assert world.get("member", "/auth/me").status_code == 200  # the token used: kept
    h = {"Authorization": f"Bearer {other}"}
    assert world.client.get(API + "/auth/me", headers=h).status_code == 401
    assert login(world.client, "ann", PASSWORD).status_code == 401
    assert login(world.client, "ann", "a new long password").status_code == 200


def test_an_admin_resets_another_password_without_it_and_revokes_all_tokens(world):
    r = world.patch("admin", "/users/ann", json={"password": "reset by the admin"})
    assert r.status_code == 200, r.text
    assert world.get("member", "/auth/me").status_code == 401
    assert world.get("admin", "/auth/me").status_code == 200
    assert login(world.client, "ann", "reset by the admin").status_code == 200


def test_an_admin_changing_their_own_password_needs_the_current_one(world):
    r = world.patch("admin", "/users/root", json={"password": "a new long password"})
    assert r.status_code == 422
