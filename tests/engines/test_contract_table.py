"""docs/executors.md's table of engines and capabilities is the one the contract renders
(scripts/contract_table.py): a mixin added, an engine that gains or loses a power, or a
changed contract line makes this fail until `python3 scripts/contract_table.py --write`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from gpupool.clock import ManualClock
from gpupool.engines.common.engine import EngineEnv
from gpupool.engines.common.executor import CAPABILITIES, ExecutorWithLogs
from gpupool.engines.fake.engine import FakeEngine

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "contract_table.py"


def _script():
    spec = importlib.util.spec_from_file_location("contract_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["contract_table"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_docs_table_is_the_rendered_one():
    ct = _script()
    table = ct.render()
    assert ct.in_doc(ct.DOC.read_text()) == table, (
        "docs/executors.md is out of date: run python3 scripts/contract_table.py --write"
    )
    assert ct.main(["--check"]) == 0


def test_the_table_marks_what_each_executor_class_declares(tmp_path, monkeypatch):
    ct = _script()
    rows = {line.split(" | ")[0].strip("| `"): line for line in ct.render().splitlines()[2:]}
    assert list(rows) == [c.__name__ for c in CAPABILITIES]
    logs = rows["ExecutorWithLogs"].rstrip(" |").split(" | ")
    assert logs[1] == "`log_chunks`, `log_tail`, `logs`"
    assert logs[2] == ExecutorWithLogs.__doc__.splitlines()[0]
    assert logs[3:] == ["✓", "✓", "✓", "✓", "–"]  # local, kubernetes, slurm, fake, template
    doc = tmp_path / "executors.md"
    doc.write_text(f"before\n{ct.BEGIN}\nstale\n{ct.END}\nafter\n")
    monkeypatch.setattr(ct, "DOC", doc)
    assert ct.main(["--check"]) == 1
    assert ct.main(["--write"]) == 0 and ct.main(["--check"]) == 0
    assert doc.read_text() == f"before\n{ct.BEGIN}\n{ct.render()}{ct.END}\nafter\n"


def test_an_engine_opens_an_executor_of_its_executor_class():
    engine = FakeEngine()
    assert isinstance(engine.open(EngineEnv(ManualClock())), FakeEngine.executor_class)
