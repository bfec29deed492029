"""The data directory private to the server's account, whatever the engine: the directory
0700; the database and its side files, job state files and secrets 0600; job directories
0700. Run at every start (`secure_data_dir`), so installs made by earlier versions (0755 /
0644) are fixed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

#: Directories under the data dir that jobs never need (their files are the server's).
PRIVATE_TREES = ("jobs", "hub-launch", "hub")


def secure_data_dir(data_dir: Path) -> list[str]:
    """Make the data directory private to the server's account; return what was fixed."""
    fixed: list[str] = []

    def tighten(p: Path, want: int) -> None:
        with contextlib.suppress(FileNotFoundError, PermissionError):
            st = p.lstat()
            if p.is_symlink() or st.st_uid != os.geteuid():
                return  # a job's own file (its log) or a link: leave it alone
            if st.st_mode & 0o777 & ~want:
                p.chmod(st.st_mode & 0o777 & want)
                fixed.append(str(p))

    tighten(data_dir, 0o700)
    for child in data_dir.iterdir():
        if child.is_file():
            tighten(child, 0o600)
    for name in PRIVATE_TREES:
        tree = data_dir / name
        if not tree.is_dir():
            continue
        tighten(tree, 0o700)
        for root, dirs, files in os.walk(tree):
            for d in dirs:
                tighten(Path(root) / d, 0o700)
            for f in files:
                tighten(Path(root) / f, 0o600)
    return fixed
