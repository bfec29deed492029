"""The login throttle is not a lockout weapon (review F11): a stranger failing now and then
from another address delays the right password by a bounded time, and guessing from many
addresses stays bounded per account. A ManualClock stands in for time."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpupool.server.problems import TooManyRequests
from tests.server.conftest import API, PASSWORD

WRONG = "not the password"
HOUR = 3600.0
#: the longest the right password may be held up by others' failures (throttle.ACCOUNT_WIDE)
BOUND_S = 300.0


def login(client, user: str, password: str):
    return client.post(API + "/auth/login", json={"username": user, "password": password})


def at(world, address: str) -> TestClient:
    return TestClient(world.app, client=(address, 4242))


def test_a_stranger_failing_every_15_minutes_does_not_lock_the_admin_out(world):
    attacker, admin = at(world, "203.0.113.66"), at(world, "10.0.0.2")
    # the stranger first fails as fast as the throttle lets them, for an hour ...
    start = world.clock.now()
    while world.clock.now() - start < HOUR:
        r = login(attacker, "root", WRONG)
        assert r.status_code in (401, 429)
        world.clock.advance(int(r.headers.get("retry-after", 1)))
    # ... then once every 15 minutes, for a day; the admin logs in at odd times in between
    longest_wait = 0.0
    for step in range(96):
        assert login(attacker, "root", WRONG).status_code in (401, 429)
        world.clock.advance(60 + 7 * (step % 13))  # the admin comes 1 to 2.5 minutes later
        waited = 0.0
        while (r := login(admin, "root", PASSWORD)).status_code == 429:
            wait = int(r.headers["retry-after"])
            world.clock.advance(wait)
            waited += wait
            assert waited <= BOUND_S, r.text
        assert r.status_code == 200, r.text
        longest_wait = max(longest_wait, waited)
        world.clock.advance(900 - 60 - 7 * (step % 13) - waited)
    assert longest_wait <= BOUND_S


def test_the_right_password_gets_through_a_blocked_account_within_five_minutes(world):
    for i in range(12):  # guessers at twelve addresses, one wrong try each
        assert login(at(world, f"198.51.100.{i}"), "root", WRONG).status_code in (401, 429)
    admin = at(world, "10.0.0.2")
    r = login(admin, "root", PASSWORD)
    assert r.status_code == 429 and "from any address" in r.json()["detail"]
    assert int(r.headers["retry-after"]) <= BOUND_S
    world.clock.advance(int(r.headers["retry-after"]))
    assert login(admin, "root", PASSWORD).status_code == 200


def test_guessing_from_many_addresses_stays_bounded_per_account(world):
    """A guesser with 200 addresses tries the admin's account every 5 seconds for three
    hours: the passwords actually checked stay within a few dozen in the first hour and
    about one per 5 minutes after."""
    throttle = world.ctx.login_throttle
    checks_per_hour = [0, 0, 0]
    start = world.clock.now()
    i = 0
    while (t := world.clock.now() - start) < 3 * HOUR:
        keys = throttle.keys("root", f"2001:db8::{i % 200:x}")
        i += 1
        try:
            throttle.check(keys)
        except TooManyRequests:
            pass
        else:  # the password would be checked now, and it is wrong
            checks_per_hour[int(t // HOUR)] += 1
            throttle.failed(keys)
        world.clock.advance(5)
    assert checks_per_hour[0] <= 30, checks_per_hour
    assert checks_per_hour[1] <= HOUR / BOUND_S + 1, checks_per_hour
    assert checks_per_hour[2] <= HOUR / BOUND_S + 1, checks_per_hour


def test_one_address_guessing_is_blocked_longer_than_the_account(world):
    guesser = at(world, "203.0.113.9")
    failures = 0
    while failures < 16:
        r = login(guesser, "ann", WRONG)
        failures += r.status_code == 401
        world.clock.advance(int(r.headers.get("retry-after", 0)))
    r = login(guesser, "ann", PASSWORD)
    assert r.status_code == 429 and "from your address" in r.json()["detail"]
    assert int(r.headers["retry-after"]) > BOUND_S
    # ann herself, elsewhere, is not held by the guesser's own block
    world.clock.advance(BOUND_S)
    assert login(at(world, "10.0.0.3"), "ann", PASSWORD).status_code == 200
    assert login(guesser, "ann", PASSWORD).status_code == 429


def test_the_account_wide_block_is_the_bound():
    from gpupool.server.throttle import ACCOUNT, ACCOUNT_WIDE

    assert ACCOUNT_WIDE.max_s == BOUND_S < ACCOUNT.max_s
