"""The OpenAPI document of /api/v1, built from the routes and the API's models alone (no
store, no engine: the server's routes and the dashboard's, as `gpupool up` mounts them), and
its checked-in copy `docs/openapi.json`: an API change is a visible diff there
(tests/server/test_openapi_doc.py fails until the copy is updated).

    python3 -m gpupool.cli.openapi --write   # update docs/openapi.json
    python3 -m gpupool.cli.openapi --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from gpupool.server import problems
from gpupool.server.app import APP_INFO, add_routes
from gpupool.web import create_router

#: the checked-in copy, from the repository root
DOCUMENT = Path("docs/openapi.json")


def document() -> dict[str, Any]:
    """The OpenAPI document the server serves at /api/v1/openapi.json."""
    app = FastAPI(**APP_INFO)
    problems.install(app)
    add_routes(app)
    app.include_router(create_router())
    return app.openapi()


def render() -> str:
    """`document()` as the file holds it: sorted keys, 2-space indent, a final newline."""
    return json.dumps(document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m gpupool.cli.openapi", description=__doc__)
    ap.add_argument("--write", action="store_true", help=f"write {DOCUMENT}")
    ap.add_argument("--check", action="store_true", help=f"exit 1 if {DOCUMENT} is out of date")
    ap.add_argument("--path", type=Path, default=DOCUMENT, help="the file (default: %(default)s)")
    args = ap.parse_args(argv)
    text = render()
    if args.write:
        args.path.write_text(text)
        print(f"wrote {args.path}")
        return 0
    if args.check:
        if not args.path.exists() or args.path.read_text() != text:
            print(
                f"{args.path} is out of date: run python3 -m gpupool.cli.openapi --write "
                "and commit the change",
                file=sys.stderr,
            )
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
