"""Reading the logs of a workload's pods through the API server, bounded.

Contract: nothing is held whole. `stream` yields the log in the API's chunks (a gang: each
rank's after a `== rank R (pod) ==` line); the API cannot seek, so `offset` bytes are read
and dropped. `tail` asks for `tailLines` and keeps at most `max_bytes` (a gang: each rank in
its share). API errors are raised as `ExecutorError` when the read starts, not mid-stream.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpupool.engines.common import logread
from gpupool.engines.common.executor import ExecutorError
from gpupool.engines.kubernetes.client import KubeApi, KubeError


def _pod_log(api: KubeApi, namespace: str, pod: str, tail_lines: int | None) -> Iterator[bytes]:
    try:
        return api.pod_log_chunks(namespace, pod, tail_lines)
    except KubeError as e:
        raise ExecutorError(f"reading the log of pod {namespace}/{pod} failed: {e}") from None


def _rank_line(rank: int, pod: str) -> bytes:
    return f"== rank {rank} ({pod}) ==\n".encode()


def stream(api: KubeApi, namespace: str, pods: list[str], offset: int = 0) -> Iterator[bytes]:
    """The log of `pods` (one pod, or a gang's in rank order) from byte `offset`."""
    if len(pods) == 1:
        return logread.skip_bytes(_pod_log(api, namespace, pods[0], None), offset)
    return logread.skip_bytes(_gang(api, namespace, pods), offset)


def _gang(api: KubeApi, namespace: str, pods: list[str]) -> Iterator[bytes]:
    for rank, name in enumerate(pods):
        yield _rank_line(rank, name)
        last = b"\n"
        for chunk in _pod_log(api, namespace, name, None):
            last = chunk
            yield chunk
        if not last.endswith(b"\n"):
            yield b"\n"


def tail(api: KubeApi, namespace: str, pods: list[str], lines: int, max_bytes: int) -> bytes:
    """The last `lines` lines of `pods`' log, at most `max_bytes` in all."""
    if len(pods) == 1:
        return _tail(api, namespace, pods[0], lines, max_bytes)
    share = max(1, max_bytes // len(pods))
    parts = [
        _rank_line(rank, name) + _tail(api, namespace, name, lines, share)
        for rank, name in enumerate(pods)
    ]
    return b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts)


def _tail(api: KubeApi, namespace: str, pod: str, lines: int, max_bytes: int) -> bytes:
    try:
        data, dropped = logread.last_bytes(_pod_log(api, namespace, pod, lines), max_bytes)
    except KubeError as e:
        raise ExecutorError(f"reading the log of pod {namespace}/{pod} failed: {e}") from None
    return logread.tail_of(data, lines, starts_mid_line=dropped)
