"""Schemathesis: generated requests for every operation in the published OpenAPI document,
sent to the ASGI app as an admin (who gets past authorization the furthest) and as a member,
on SQLite and PostgreSQL (which refuses what SQLite stores, e.g. NUL bytes in text).
No answer may be a 5xx; every error must be problem+json. Bounded to keep the run short."""

from __future__ import annotations

import os

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402

from gpupool.server.services.accounts import issue_token  # noqa: E402
from tests.store.databases import DB_PARAMS  # noqa: E402

#: GPUPOOL_FUZZ_EXAMPLES=200 for a longer hunt
EXAMPLES_PER_OPERATION = int(os.environ.get("GPUPOOL_FUZZ_EXAMPLES", "10"))
#: Logging out would revoke the token the fuzzer uses; it is covered by test_api.
SKIP = {("POST", "/api/v1/auth/logout")}


@pytest.mark.parametrize("world", DB_PARAMS, indirect=True)
def test_generated_requests_never_get_a_5xx(world):
    from schemathesis.python import asgi

    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", world.app)
    with asgi.get_client(world.app) as session:
        _run_all(world, schema, session)


def _run_all(world, schema, session) -> None:
    failures: list[str] = []
    counter = [0]
    for result in schema.get_all_operations():
        op = result.ok()
        if (op.method.upper(), op.path) in SKIP:
            continue
        for role in ("admin", "member"):
            token = issue_token(world.ctx, "root" if role == "admin" else "ann", "fuzz", None)
            _fuzz(op, session, {"Authorization": f"Bearer {token.token}"}, failures, counter)
    assert counter[0] > 200
    assert not failures, "\n".join(sorted(set(failures))[:20])


def _fuzz(op, session, headers: dict[str, str], failures: list[str], counter: list[int]) -> None:
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy())
    def run(case):
        where = f"{op.method.upper()} {op.path}"
        counter[0] += 1
        try:
            response = case.call(session=session, headers=headers)
        except Exception as e:  # noqa: BLE001 - the app raised: a 500 for a real client
            failures.append(
                f"{where} raised {e!r} (body {case.body!r:.200}, query {case.query!r:.200})"
            )
            return
        if response.status_code >= 500:
            failures.append(
                f"{where} -> {response.status_code}: {response.text[:300]} "
                f"(sent body {case.body!r:.200}, query {case.query!r:.200})"
            )
        elif response.status_code >= 400:
            ctype = response.headers.get("content-type", "")
            ctype = ctype[0] if isinstance(ctype, list) else ctype
            if "application/problem+json" not in ctype:
                failures.append(f"{where} -> {response.status_code} as {ctype}")

    run()
