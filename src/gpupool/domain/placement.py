"""Placement labels: which engine runs a node, what it can do, and the pins a request puts
on nodes. Pure: no I/O.

Every node an engine registers carries `ENGINE_LABEL=<engine name>`; engines whose executor
runs multi-node work add `MULTI_NODE_LABEL=true`, engines that enforce fractional shares with
CUDA MPS add `MPS_LABEL=true`. A node without `ENGINE_LABEL` (an older store, a test's plain
node) counts as any engine and as capable of everything.

Label keys and values follow Kubernetes' syntax, so one label means the same on every engine:
a key is `[prefix/]name` (prefix a DNS subdomain of at most 253 characters, name at most 63
of letters, digits, `-`, `_`, `.`, starting and ending alphanumeric); a value is empty or
like a name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from gpupool.domain.errors import ValidationError

#: the engine that runs a node (`local`, `slurm`, `kubernetes`, `fake`, ...)
ENGINE_LABEL = "gpupool.io/engine"
#: `true` on nodes whose engine runs multi-node work (a gang)
MULTI_NODE_LABEL = "gpupool.io/multi-node"
#: `true` on nodes whose engine enforces fractional shares with CUDA MPS
MPS_LABEL = "gpupool.io/mps"

_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: an engine's name as the registry spells it
_ENGINE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def check_label_key(key: str, field: str = "node_labels") -> None:
    """Raise ValidationError (naming `field`) unless `key` is a label key."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        raise ValidationError(
            f"node label key {key!r}: the part before '/' must be a DNS name such as "
            "example.com (lowercase letters, digits, '-' and '.')",
            field,
        )
    if not _NAME.match(name):
        raise ValidationError(
            f"node label key {key!r}: the name must be 1 to 63 letters, digits, '-', '_' or "
            "'.', starting and ending with a letter or digit",
            field,
        )


def check_label_value(key: str, value: str, field: str = "node_labels") -> None:
    """Raise ValidationError unless `value` is a label value (empty, or like a key's name)."""
    if value and not _NAME.match(value):
        raise ValidationError(
            f"node label {key}={value!r}: a value must be empty or 1 to 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit",
            field,
        )


def check_engine_name(engine: str, field: str = "engine") -> None:
    """Raise ValidationError unless `engine` could name an engine."""
    if not _ENGINE.match(engine):
        raise ValidationError(
            f"engine {engine!r} is not an engine name: lowercase letters, digits, '-' or '_', "
            "starting with a letter (e.g. local, slurm, kubernetes)",
            field,
        )


def normalize_labels(
    labels: Iterable[tuple[str, str]] | Mapping[str, str], field: str = "node_labels"
) -> tuple[tuple[str, str], ...]:
    """`labels` checked and sorted by key; a key given twice with different values is refused."""
    pairs = list(labels.items()) if isinstance(labels, Mapping) else list(labels)
    seen: dict[str, str] = {}
    for key, value in pairs:
        check_label_key(key, field)
        check_label_value(key, value, field)
        if key in seen and seen[key] != value:
            raise ValidationError(
                f"node label {key} is given twice ({seen[key]!r} and {value!r}): give it once",
                field,
            )
        seen[key] = value
    return tuple(sorted(seen.items()))


def parse_label(text: str, field: str = "node_labels") -> tuple[str, str]:
    """'zone=a' -> ('zone', 'a'), checked."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValidationError(f"node label {text!r}: write it as KEY=VALUE (e.g. zone=a)", field)
    key, value = key.strip(), value.strip()
    check_label_key(key, field)
    check_label_value(key, value, field)
    return key, value


def labels_text(labels: Iterable[tuple[str, str]]) -> str:
    """'zone=a, gpupool.io/engine=slurm'."""
    return ", ".join(f"{k}={v}" for k, v in labels)


def engine_of(labels: Mapping[str, str]) -> str | None:
    """The engine a node's labels name (None: unlabelled, counts as any)."""
    return labels.get(ENGINE_LABEL)


def runs_multi_node(labels: Mapping[str, str]) -> bool:
    """True if a node with `labels` may hold part of a multi-node request."""
    return ENGINE_LABEL not in labels or labels.get(MULTI_NODE_LABEL) == "true"


def enforces_mps(labels: Mapping[str, str]) -> bool:
    """True if fractional shares on a node with `labels` may be recorded as MPS-enforced."""
    return ENGINE_LABEL not in labels or labels.get(MPS_LABEL) == "true"
