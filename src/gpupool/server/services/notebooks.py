"""Which notebooks gpupool takes while JupyterHub runs beside it (`AppContext.hub`).

Every engine runs notebooks itself: the hub's spawner submits a `notebook` workload with its
single-user server's command and waits for the endpoint the engine reports
(gpupool.jupyterhub.spawner). Two rules keep that safe and useful:

- **a notebook needs its server** (`check_has_server`): one without a command (and without a
  pod template, which brings its own) has nothing to run; it is refused at submit (403)
  with where to start notebooks instead (the hub's spawn page), before it holds a GPU;
- **one account, one person** (`one_account_refusal`): where the executor runs every user's
  work as one Unix account (`ExecutorWithNotebooks.one_account`: the local engine without
  root, Slurm without per-user accounts), one user's notebook or job could rewrite another
  user's notebook (``~/.jupyter``) and act in their hub session (review F2b of issue 29).
  There only the first admin's notebooks run (`AppContext.notebook_owner`): others are
  refused at submit (403) and, if queued before, fail at admission with the same reason.

In a pool of several engines the hub's notebooks run on the default engine's nodes
(`pin_to_hub_engine`): the single-user command the hub gives is that engine's.
"""

from __future__ import annotations

import dataclasses

from gpupool.domain import Request, Workload, WorkloadKind
from gpupool.engines.common.executor import ExecutorWithNotebooks
from gpupool.server.context import AppContext
from gpupool.server.problems import PermissionDenied


def check_has_server(ctx: AppContext, w: Workload, has_template: bool) -> None:
    """PermissionDenied for a notebook without a command (or a pod template) while the hub
    runs: nothing would start it."""
    if not ctx.hub or w.kind is not WorkloadKind.NOTEBOOK or w.command or has_template:
        return
    raise PermissionDenied(
        "JupyterHub runs beside this gpupool and starts its notebooks: start yours from the "
        "hub's spawn page (/hub/spawn, or the dashboard's 'Start notebook', which opens it), "
        "where it waits in this queue; a notebook submitted here without its server's "
        "command would hold its GPUs with nothing to start it"
    )


def one_account_refusal(ctx: AppContext, w: Workload) -> str | None:
    """Why notebook `w` may not run here (see the module docstring), or None."""
    ex = ctx.executor
    if not ctx.hub or w.kind is not WorkloadKind.NOTEBOOK:
        return None
    if not isinstance(ex, ExecutorWithNotebooks) or not ex.one_account:
        return None
    if w.owner == ctx.notebook_owner:
        return None
    who = f"only {ctx.notebook_owner!r}" if ctx.notebook_owner else "nobody"
    return (
        f"JupyterHub here serves {who}: every notebook would run as one Unix account "
        "(gpupool does not run as root, or its engine runs all work as one account), "
        "where one user's notebook or job could change another user's notebook and act "
        "in their session. Ask the admin to run gpupool as root so that each user's work "
        "runs as a Unix account of their own"
    )


def pin_to_hub_engine(ctx: AppContext, req: Request, kind: WorkloadKind) -> Request:
    """`req` pinned to the engine that runs the hub's notebooks (`AppContext.notebook_engine`)
    when it is a notebook without a pin of its own; else `req` unchanged."""
    if not ctx.notebook_engine or kind is not WorkloadKind.NOTEBOOK or req.engine is not None:
        return req
    return dataclasses.replace(req, engine=ctx.notebook_engine)
