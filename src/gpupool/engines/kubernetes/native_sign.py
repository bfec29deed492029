"""The webhook's signed mark on a queued object, so that gpupool attributes a stored Pod or
Job to a user only when its own webhook wrote that attribution on that object
(docs/security.md, "Kubernetes deployment").

The webhook's JSON patch writes the label `gpupool.dev/native-workload: <workload id>` (a
fresh random id per review: the nonce), the annotation `gpupool.dev/submitter: <the
requesting Kubernetes user>` and the annotation `gpupool.dev/signature:
v1.<review time>.<HMAC-SHA256>` over the kind, namespace, name (or `generateName`: the API
server names such an object after admission), submitter, workload id and review time, with
a key only the gpupool server holds (`load_key`: a file in its data directory).

`Signer.verify` accepts a stored object only if the signature matches what it carries and
its `creationTimestamp` (written by the API server, not by the client) is within
`window_s` of the review time. So a copied or hand-written mark never verifies, and a mark
obtained by posting a made-up review straight to the webhook (it answers anyone who reaches
its port) is useless later: the webhook overwrites it when the object is created through
the API server, and it expires before an object could be made some other way.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpupool.engines.kubernetes import native

SIGNATURE = native.SIGNATURE
VERSION = "v1"
#: how far the API server's creationTimestamp may be from the review time (clock skew
#: between gpupool and the API server, plus the webhook's timeout)
WINDOW_S = 120.0
KEY_FILE = "webhook-signing.key"


class Unsigned(ValueError):
    """The object does not carry a mark gpupool's webhook wrote on it; the message says why."""


@dataclass(frozen=True)
class Claim:
    """A verified mark: who submitted the object, and the workload id it is queued as."""

    submitter: str
    workload_id: str


def load_key(data_dir: Path | None) -> bytes:
    """The signing key in `data_dir` (made on first use, readable by the server only); a
    key for this process alone when there is no data directory."""
    if data_dir is None:
        return secrets.token_bytes(32)
    path = data_dir / KEY_FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()  # made meanwhile
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def _when(raw: Any) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _name_field(meta: Mapping[str, Any]) -> str:
    name = str(meta.get("name") or "")
    return f"name={name}" if name else f"prefix={meta.get('generateName') or ''}"


class Signer:
    """Signs at review time, verifies what the watch sees (see the module docstring)."""

    def __init__(self, key: bytes, window_s: float = WINDOW_S):
        self._key = key
        self.window_s = window_s

    def _mac(self, kind: str, ns: str, name_field: str, submitter: str, wid: str, at: int) -> str:
        msg = "\n".join((VERSION, kind, ns, name_field, submitter, wid, str(at)))
        return hmac.new(self._key, msg.encode(), hashlib.sha256).hexdigest()

    def sign(self, obj: Mapping[str, Any], ns: str, submitter: str, wid: str, at: float) -> str:
        """The signature annotation's value for `obj` as the review shows it."""
        meta = obj.get("metadata") or {}
        t = int(at)
        mac = self._mac(str(obj.get("kind")), ns, _name_field(meta), submitter, wid, t)
        return f"{VERSION}.{t}.{mac}"

    def verify(self, obj: Mapping[str, Any]) -> Claim:
        """The claim of a stored object; Unsigned when its mark is not the webhook's."""
        meta = obj.get("metadata") or {}
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        wid, submitter = labels.get(native.NATIVE), notes.get(native.SUBMITTER)
        raw = notes.get(SIGNATURE)
        if not wid or submitter is None or not raw:
            raise Unsigned("it carries no signature of gpupool's webhook")
        version, _, rest = str(raw).partition(".")
        at_s, _, mac = rest.partition(".")
        if version != VERSION or not at_s.isdigit():
            raise Unsigned(f"its {SIGNATURE} is malformed")
        at, ns, name = int(at_s), str(meta.get("namespace") or ""), str(meta.get("name") or "")
        kind = str(obj.get("kind"))
        fields = [f"name={name}"]
        prefix = str(meta.get("generateName") or "")
        if prefix and name.startswith(prefix):
            fields.append(f"prefix={prefix}")
        if not any(
            hmac.compare_digest(mac, self._mac(kind, ns, f, str(submitter), str(wid), at))
            for f in fields
        ):
            raise Unsigned(
                f"its {SIGNATURE} does not match its submitter, name and workload id (a "
                "gpupool.dev annotation or label was edited or copied from another object)"
            )
        created = _when(meta.get("creationTimestamp"))
        if created is None or abs(created - at) > self.window_s:
            raise Unsigned(
                f"its {SIGNATURE} was not written when the object was created (a mark "
                "obtained for another request)"
            )
        return Claim(str(submitter), str(wid))

    def valid(self, obj: Mapping[str, Any]) -> bool:
        try:
            self.verify(obj)
        except Unsigned:
            return False
        return True
