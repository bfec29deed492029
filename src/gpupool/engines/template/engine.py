"""The template engine: what `gpupool up --engine template` would open (not registered).

Fill in:

- `TemplateOptions`: what the admin chooses. A field with ``help`` in its metadata becomes a
  flag of `gpupool up` (``--<engine>-<field>``, in the engine's own help panel; see
  `gpupool.engines.common.options` for ``flag``, ``metavar``, ``choices``...); fields without
  it are for code (tests, the system).
- `TemplateEngine.open`: check the engine can work as configured (raise `EngineError` with
  what to do), then return the executor (`executor.py`).
- `TemplateEngine.inventory`: the nodes and GPUs work may run on (`inventory.py`).
- Optional hooks of `gpupool.engines.common.engine.Engine` where the engine has them:
  `telemetry()` (GPUs sampled in this process), `inventory_interval_s` (re-read the nodes),
  `sync_tenants`, `describe`, `notebook_command`, `follow`, `close`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.domain import Node
from gpupool.engines.common.engine import Engine, EngineEnv, EngineError
from gpupool.engines.common.executor import Executor
from gpupool.engines.template.executor import TemplateExecutor
from gpupool.engines.template.inventory import read_nodes


@dataclass(frozen=True)
class TemplateOptions:
    """The engine's choices; `endpoint` is an example of a flag (``--template-endpoint``)."""

    endpoint: str | None = field(
        default=None,
        metadata={"metavar": "URL", "help": "Where the cluster's API answers (an example)."},
    )


class TemplateEngine(Engine):
    """Fill in `open` and `inventory`; override the optional hooks the engine has."""

    name = "template"
    executor_class = TemplateExecutor

    def __init__(self, options: TemplateOptions | None = None) -> None:
        self.options = options or TemplateOptions()
        self.executor: TemplateExecutor | None = None

    def open(self, env: EngineEnv) -> Executor:
        if self.options.endpoint == "":
            raise EngineError("--template-endpoint is empty; give the cluster's URL")
        self.executor = TemplateExecutor(env.clock)
        return self.executor

    def inventory(self) -> list[Node]:
        return read_nodes(self.options.endpoint)
