"""Placement constraints: which nodes a request may use at all. Pure: no I/O.

A request's `Where` (part of its `Shape`, so memos keep constrained and free work apart)
gathers what narrows its nodes (labels: gpupool.domain.placement):

* `engine`: pinned to one engine: only nodes labelled `gpupool.io/engine=<it>`;
* `labels`: every (key, value) must be among the node's labels;
* `multi_node`: a gang: only nodes whose engine runs multi-node work
  (`gpupool.io/multi-node=true`), and all of one gang's nodes on one engine
  (`engine_groups`).

A node without an engine label counts as any engine and as capable of everything (older
stores, tests' plain nodes), so a pool without engine labels places as before. A request
without pins and on one node has no `Where` (None): the unconstrained fast paths serve it.
Fractional shares are not constrained to MPS nodes: no request, profile or policy asks for
MPS enforcement; a fraction on a node whose engine does not label it `gpupool.io/mps=true`
is recorded `policed` instead (`shared_enforcement_on`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from gpupool.domain import Enforcement, Node, Request
from gpupool.domain.placement import (
    ENGINE_LABEL,
    enforces_mps,
    engine_of,
    labels_text,
    runs_multi_node,
)


class Where(NamedTuple):
    """What narrows the nodes of one request (see the module docstring)."""

    engine: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    multi_node: bool = False


def where_of(request: Request) -> Where | None:
    """The request's constraints, or None when it has none."""
    if request.engine is None and not request.node_labels and request.nodes <= 1:
        return None
    return Where(request.engine, request.node_labels, request.nodes > 1)


def node_allows(labels: Mapping[str, str], where: Where) -> bool:
    """True if a node with `labels` may hold (its part of) work constrained by `where`."""
    if where.engine is not None:
        engine = labels.get(ENGINE_LABEL)
        if engine is not None and engine != where.engine:
            return False
    for k, v in where.labels:
        if labels.get(k) != v:
            return False
    return not where.multi_node or runs_multi_node(labels)


def shared_enforcement_on(labels: Mapping[str, str], shared: Enforcement) -> Enforcement:
    """The enforcement a fraction on a node with `labels` gets: `shared` (the configured
    level), but never `mps` on a node whose engine does not enforce MPS."""
    if shared is Enforcement.MPS and not enforces_mps(labels):
        return Enforcement.POLICED
    return shared


def engine_groups(engines: Sequence[str | None], ids: list[int]) -> list[list[int]]:
    """`ids` (node ids; `engines[n]` is node n's engine label) split into the sets one gang
    may use: per engine, its nodes and the unlabelled ones (in id order). One set, `ids`
    itself, when none is labelled."""
    names = sorted({e for n in ids if (e := engines[n]) is not None})
    if not names:
        return [ids]
    return [[n for n in ids if engines[n] in (e, None)] for e in names]


# -- reasons ---------------------------------------------------------------------------------


def _engines_text(names: list[str]) -> str:
    if len(names) == 1:
        return f"the {names[0]} engine's nodes"
    return "the nodes of the " + ", ".join(names[:-1]) + f" and {names[-1]} engines"


def where_text(nodes: Sequence[Node], where: Where) -> str:
    """What `where` asks, for reasons: 'pinned to engine kubernetes', 'needs node label
    zone=a', 'needs several nodes at once: only the slurm engine's nodes run multi-node
    work' (this part only where some node's engine does not run multi-node work)."""
    parts = []
    if where.engine is not None:
        parts.append(f"pinned to engine {where.engine}")
    if where.labels:
        s = "s" if len(where.labels) > 1 else ""
        parts.append(f"needs node label{s} {labels_text(where.labels)}")
    if where.multi_node:
        maps = [n.label_map for n in nodes]
        if any(not runs_multi_node(m) for m in maps):
            able = sorted({e for m in maps if runs_multi_node(m) and (e := engine_of(m))})
            if able:
                parts.append(
                    f"needs several nodes at once: only {_engines_text(able)} run multi-node work"
                )
            elif any(ENGINE_LABEL not in m for m in maps):
                parts.append("needs several nodes at once: only unlabelled nodes run it")
            else:
                parts.append("needs several nodes at once: no engine here runs multi-node work")
    return "; ".join(parts)


def none_match_text(nodes: Sequence[Node], where: Where) -> str:
    """Why no registered node matches `where` at all (for 'never runs')."""
    maps = [n.label_map for n in nodes]
    engines = sorted({e for m in maps if (e := engine_of(m)) is not None})
    if where.engine is not None and not any(
        node_allows(m, Where(engine=where.engine)) for m in maps
    ):
        return (
            f"pinned to engine {where.engine}: no node of it is registered (the engines here: "
            f"{', '.join(engines) or 'none'})"
        )
    pinned = Where(engine=where.engine, labels=where.labels)
    if where.labels and not any(node_allows(m, pinned) for m in maps):
        of = f" of engine {where.engine}" if where.engine is not None else ""
        s, it = ("s", "them all") if len(where.labels) > 1 else ("", "it")
        return f"needs node label{s} {labels_text(where.labels)}: no node{of} has {it}"
    text = where_text(nodes, where)
    if where.engine is not None and where.multi_node:
        return f"{text}: the {where.engine} engine does not run multi-node work"
    return text


def nodes_noun(where: Where) -> str:
    """'no node of it' / 'no node with it' / 'no node that runs multi-node work'."""
    if where.engine is not None:
        return "no node of it"
    if where.labels:
        return "no node with " + ("them" if len(where.labels) > 1 else "it")
    return "no node that runs multi-node work"
