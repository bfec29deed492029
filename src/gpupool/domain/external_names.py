"""Names of tenants in other systems (Kubernetes namespaces, Slurm accounts).

Contract: `external_name` is injective over tenant paths for a given prefix and style. Two
distinct tenant paths never get one name, so two tenants never share a namespace or an
account (security review F3, F12).

How: a path whose plain form (``/`` as the style's separator) is already a valid name, is
lower case and does not end like a hashed name is used as it is (``lab-a`` ->
``gpupool-lab-a``; ``phys/lab`` -> ``gp.phys.lab``), so simple set-ups keep readable, stable
names. Where the separator is itself an allowed character (``-`` in a DNS label) only
one-segment paths are plain, since ``a/b`` and ``a-b`` would otherwise meet. Every other path (upper
case, ``_`` or ``.`` where the style has none, too long, or ending like a hashed name) gets a
readable lossy form plus ``-h`` and 10 hex digits of SHA-256 of the exact path. The two
kinds of name are disjoint (only hashed names end in the hash suffix), plain names are the
identity up to the separator, and hashed names differ unless 40-bit hashes collide, which
the engines' ownership marks (the exact tenant path on the namespace or account) and
`POST /tenants` refuse besides.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from gpupool.domain.tenancy import SEPARATOR

_HASH_HEX = 10


@dataclass(frozen=True)
class NameStyle:
    """What a target system allows: `allowed` characters (a regex class body, lower case),
    the separator that stands for ``/`` and the longest name."""

    allowed: str
    separator: str
    max_len: int


#: A Kubernetes namespace: a DNS label (RFC 1123), at most 63 characters.
DNS_LABEL = NameStyle(allowed="a-z0-9-", separator="-", max_len=63)
#: A Slurm account: lower case (Slurm folds case), `.` between path segments.
SLURM_ACCOUNT = NameStyle(allowed="a-z0-9_-", separator=".", max_len=64)


def _hash_suffix_re(style: NameStyle) -> re.Pattern[str]:
    return re.compile(rf"[{re.escape(style.separator)}]h[0-9a-f]{{{_HASH_HEX}}}$")


def _is_plain(path: str, style: NameStyle) -> bool:
    segment = rf"[{style.allowed}]+"
    if style.separator in style.allowed:  # `a/b` and `a-b` would meet: one segment only
        return re.fullmatch(segment, path, re.ASCII) is not None
    return re.fullmatch(rf"{segment}(/{segment})*", path, re.ASCII) is not None


def external_name(path: str, prefix: str, style: NameStyle) -> str:
    """The name of tenant `path` in a system of `style`, starting with `prefix`
    (see the module docstring). Deterministic; injective for one prefix and style."""
    plain = prefix + path.replace(SEPARATOR, style.separator)
    suffix = _hash_suffix_re(style)
    if (
        _is_plain(path, style)
        and len(plain) <= style.max_len
        and not suffix.search(plain)
        and not plain.endswith("-")
    ):
        return plain
    digest = hashlib.sha256(path.encode()).hexdigest()[:_HASH_HEX]
    tail = f"{style.separator}h{digest}"
    lossy = re.sub(rf"[^{re.escape(style.separator)}{style.allowed}]+", "-", plain.lower())
    lossy = lossy[: style.max_len - len(tail)].rstrip("-" + style.separator)
    return lossy + tail


def namespace_name(path: str, prefix: str = "gpupool-") -> str:
    """The Kubernetes namespace of tenant `path`."""
    return external_name(path, prefix, DNS_LABEL)


def slurm_account_name(path: str, prefix: str = "gp.") -> str:
    """The Slurm account of tenant `path`."""
    return external_name(path, prefix, SLURM_ACCOUNT)


#: (what the name is, in words; tenant path -> that name) for every system that names
#: tenants: a new tenant may take none of an existing tenant's names (`POST /tenants`)
TENANT_NAMES: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("Kubernetes namespace", namespace_name),
    ("Slurm account", slurm_account_name),
)
