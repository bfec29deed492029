"""The engine template (`engines/template/`): it imports, its classes follow the contract,
it is not registered, and its example option is a flag."""

from __future__ import annotations

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Request, Share, Workload
from gpupool.engines.common.engine import Engine, EngineEnv, EngineError
from gpupool.engines.common.executor import ExecState, Executor, StartError
from gpupool.engines.common.options import flags
from gpupool.engines.registry import ENGINES
from gpupool.engines.template.engine import TemplateEngine, TemplateOptions
from gpupool.engines.template.executor import TemplateExecutor


def test_the_template_subclasses_the_contract_and_is_not_registered():
    assert issubclass(TemplateEngine, Engine) and issubclass(TemplateExecutor, Executor)
    assert "template" not in ENGINES
    assert [f.name for f in flags("template", TemplateOptions)] == ["--template-endpoint"]


def test_the_template_opens_and_runs_nothing():
    engine = TemplateEngine()
    ex = engine.open(EngineEnv(ManualClock(0.0)))
    assert isinstance(ex, TemplateExecutor) and engine.inventory() == []
    w = Workload("w1", "lab", "ann", Request(gpus=1))
    alloc = Allocation("w1", "n1", (Share("n1", 0, "g0", 1000, 1024),), 0.0)
    with pytest.raises(StartError) as e:
        ex.start(w, alloc)
    assert e.value.permanent
    assert ex.poll("w1").state is ExecState.UNKNOWN and ex.list_running() == []
    with pytest.raises(EngineError):
        TemplateEngine(TemplateOptions(endpoint="")).open(EngineEnv(ManualClock(0.0)))
