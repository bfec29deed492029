"""configurable-http-proxy is installed at one pinned version everywhere it is named: the
newest whose whole dependency tree accepts Debian 12's Node 18 (scripts/services.sh says how
it was chosen), so `npm install -g` warns about no engine on the distribution's Node."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL = re.compile(r"npm install -g (?:--\S+ )*\"?configurable-http-proxy(@[^\s\"`)]*)?")


def test_every_install_of_the_proxy_names_the_pinned_version():
    pin = re.search(r"^CHP_VERSION=(\S+)$", (ROOT / "scripts/services.sh").read_text(), re.M)
    assert pin, "scripts/services.sh pins CHP_VERSION"
    wanted = {f"@{pin.group(1)}", "@$CHP_VERSION"}
    files = [ROOT / "README.md", ROOT / "scripts/services.sh", *(ROOT / "docs").glob("*.md")]
    found = {
        f"{f.relative_to(ROOT)}:{n}": m.group(1)
        for f in files
        for n, line in enumerate(f.read_text().splitlines(), 1)
        for m in INSTALL.finditer(line)
    }
    assert any(k.startswith("README.md:") for k in found)  # the README's first command
    unpinned = {k: v for k, v in found.items() if v not in wanted}
    assert unpinned == {}, unpinned
    major, minor = (int(x) for x in pin.group(1).split(".")[:2])
    assert (major, minor) <= (5, 1), "5.2 and later need Node 20: not Debian 12's"
