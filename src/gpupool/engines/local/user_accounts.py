"""One Unix account per gpupool user, made by gpupool (single-user mode under root).

In single-user mode no directory of accounts is needed: when gpupool runs as root it makes,
on a user's first job or notebook, an unprivileged account for that user alone (as The
Littlest JupyterHub makes ``jupyter-<name>``), so members' work never shares a uid.

- `account_name(user)`: the account's name. ``gp-<name>`` when the gpupool name already is a
  valid Unix name (lower case, at most 32 characters, no ``--``), else
  ``gp-<readable stem>--<hash>``. Injective: exact names never contain ``--`` after the
  prefix and hashed ones always do; two hashed names are equal only when 60 bits of SHA-256
  are, and `UserAccounts` refuses an account marked for another user even then.
- `UserAccounts.ensure(user)`: the account, made if missing (``useradd --system``, its own
  group, shell nologin, home ``/var/lib/gpupool-users/<account>`` 0700), marked in its GECOS
  field ``gpupool user <exact name>``. An existing account of that name that gpupool did not
  make for this very user is never used (`StartError`, permanent). Never uid 0.

Accounts are made by `useradd` with a fixed environment, one at a time on the host (a lock
file in the homes' directory: the server and the hub may both ask). gpupool never deletes
them; `userdel -r <account>` does.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpupool.engines.common.accounts import Account
from gpupool.engines.common.executor import StartError

ACCOUNT_PREFIX = "gp-"
ACCOUNTS_HOME = Path("/var/lib/gpupool-users")
#: the GECOS field of every account gpupool made: this, then the exact gpupool user name
MARK = "gpupool user "
MAX_NAME = 32
UNIX_NAME = re.compile(r"[a-z_][a-z0-9_-]*")
_PLAIN = re.compile(r"[a-z0-9_][a-z0-9_-]*")
_SEP = "--"
_HASH = 12  # base32 characters: 60 bits
#: what `useradd` runs with (never the server's environment)
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
_NOLOGIN = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")


def check_prefix(prefix: str) -> str:
    """`prefix` if it can start account names (ValueError otherwise)."""
    if not UNIX_NAME.fullmatch(prefix) or _SEP in prefix or not 1 <= len(prefix) <= 12:
        raise ValueError(
            f"account prefix {prefix!r} must be 1-12 characters of a-z, 0-9, '_' and '-', "
            "start with a letter or '_' and have no '--'"
        )
    return prefix


def account_name(user: str, prefix: str = ACCOUNT_PREFIX) -> str:
    """The Unix account of gpupool user `user` (see the module docstring; pure)."""
    check_prefix(prefix)
    room = MAX_NAME - len(prefix)
    if _PLAIN.fullmatch(user) and _SEP not in user and len(user) <= room:
        return prefix + user
    digest = base64.b32encode(hashlib.sha256(user.encode()).digest()).decode()
    stem = re.sub(r"[^a-z0-9_]+", "_", user.lower()).strip("_")[: room - len(_SEP) - _HASH]
    return f"{prefix}{stem}{_SEP}{digest[:_HASH].lower()}"


@dataclass(frozen=True, slots=True)
class UserAccounts:
    """The accounts gpupool makes for its users: names from `prefix`, homes in `home_base`.

    `default()` reads the module's `ACCOUNT_PREFIX` and `ACCOUNTS_HOME` when called (tests
    point them elsewhere)."""

    prefix: str = ACCOUNT_PREFIX
    home_base: Path = ACCOUNTS_HOME

    def __post_init__(self) -> None:
        check_prefix(self.prefix)

    @staticmethod
    def default() -> UserAccounts:
        return UserAccounts(ACCOUNT_PREFIX, ACCOUNTS_HOME)

    def name(self, user: str) -> str:
        return account_name(user, self.prefix)

    def home(self, user: str) -> Path:
        return self.home_base / self.name(user)

    def cannot(self) -> str | None:
        """Why accounts cannot be made here (not root, no useradd), or None."""
        if os.geteuid() != 0:
            return "only root can make Unix accounts"
        if shutil.which("useradd", path=_ENV["PATH"]) is None:
            return "useradd is not installed (Debian/Ubuntu: package passwd)"
        return None

    def find(self, user: str) -> Account | None:
        """`user`'s account if it exists; None if not. `StartError` (permanent) if an account
        of that name exists that gpupool did not make for `user`, or it is root."""
        name = self.name(user)
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            return None
        if pw.pw_gecos != MARK + user or pw.pw_uid == 0:
            raise StartError(
                f"the Unix account {name!r}, which gpupool would make for user {user!r}, "
                f"already exists and is not gpupool's for {user!r} (its comment is "
                f"{pw.pw_gecos!r}, uid {pw.pw_uid}); gpupool never takes over an account: "
                "rename or remove it, or run gpupool in per-user mode and set the user's "
                "unix_user",
                permanent=True,
            )
        if pw.pw_dir != str(self.home(user)):
            raise StartError(
                f"gpupool's account {name!r} has the home {pw.pw_dir!r}, not "
                f"{str(self.home(user))!r}; set it back (usermod -d)",
                permanent=True,
            )
        return Account.of(pw)

    def ensure(self, user: str) -> Account:
        """`user`'s account with its home, made if missing (see the module docstring)."""
        found = self.find(user)
        if found is not None and _is_home(Path(found.home), found.uid):
            return found
        why = self.cannot()
        if why is not None:
            raise StartError(
                f"cannot make a Unix account for gpupool user {user!r}: {why}", permanent=True
            )
        with self._locked():
            found = self.find(user) or self._create(user)
            self._make_home(found)
        return found

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        base = self.home_base
        base.mkdir(parents=True, exist_ok=True)
        st = base.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise StartError(
                f"{base} must be a directory owned by root (it holds the homes of the "
                "accounts gpupool makes)",
                permanent=True,
            )
        if stat.S_IMODE(st.st_mode) != 0o711:
            base.chmod(0o711)  # homes are reachable by their owners only, never listed
        fd = os.open(base / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _create(self, user: str) -> Account:
        name, home = self.name(user), self.home(user)
        shell = next((s for s in _NOLOGIN if os.path.exists(s)), "/bin/false")
        useradd = shutil.which("useradd", path=_ENV["PATH"])
        assert useradd is not None, "checked by cannot()"
        done = subprocess.run(
            [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", str(home)]
            + ["--shell", shell, "--comment", MARK + user, name],
            env=_ENV,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if done.returncode != 0:
            out = (done.stderr or done.stdout).strip() or f"exit {done.returncode}"
            raise StartError(
                f"could not make the Unix account {name!r} for gpupool user {user!r}: {out}",
                permanent=True,
            )
        made = self.find(user)
        if made is None:  # useradd said yes, but the account is not there
            raise StartError(f"useradd made no account {name!r}", permanent=True)
        return made

    def _make_home(self, account: Account) -> None:
        home = Path(account.home)
        with contextlib.suppress(FileExistsError):
            os.mkdir(home, 0o700)
            os.chown(home, account.uid, account.gid)
        if not _is_home(home, account.uid):
            raise StartError(
                f"{home} exists but is not a directory of {account.name!r} (a leftover of an "
                f"earlier account?); remove it or chown it to {account.name}",
                permanent=True,
            )


def _is_home(home: Path, uid: int) -> bool:
    try:
        st = home.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid
