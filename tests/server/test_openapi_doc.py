"""docs/openapi.json is the API as served: generated from the same routes and models
(gpupool.api), so that an API change is always a visible diff in the repository."""

from __future__ import annotations

import json
from pathlib import Path

from gpupool.cli import openapi

ROOT = Path(__file__).resolve().parents[2]


def test_the_checked_in_document_is_the_generated_one():
    on_file = (ROOT / "docs" / "openapi.json").read_text()
    assert on_file == openapi.render(), (
        "docs/openapi.json is out of date: run python3 -m gpupool.cli.openapi --write "
        "and commit the diff (it is the API change your work makes)"
    )


def test_the_document_is_what_the_server_serves(world):
    served = world.client.get("/api/v1/openapi.json").json()
    assert served == json.loads(openapi.render())
    assert "WorkloadIn" in served["components"]["schemas"]


def test_check_fails_on_a_changed_document_and_write_repairs_it(tmp_path, capsys):
    stale = tmp_path / "openapi.json"
    stale.write_text(openapi.render().replace('"title": "gpupool"', '"title": "old"'))
    assert openapi.main(["--check", "--path", str(stale)]) == 1
    assert "--write" in capsys.readouterr().err
    assert openapi.main(["--write", "--path", str(stale)]) == 0
    assert openapi.main(["--check", "--path", str(stale)]) == 0
    assert stale.read_text() == openapi.render()
