"""No engine is named where engine-specific logic must not be: the contract and the helpers
engines share (engines/common), the server, the dashboard, the hub side and the node agent
(issue 31: a closed contract).

import-linter keeps those layers from importing an engine; this test keeps them from
branching on one by name. It reads the code (identifiers and string constants; docstrings
and comments may name engines as examples) and looks for engine words: `kubernetes`,
`kube...`, `k8s`, `slurm...`, `pod`/`pods`. What may stay is listed below with why: the
wire and API field names (a report's `pod_uid` and `slurm_job_id`, a workload's
`pod_spec`, the `pod` a process is shown in), which are protocol, not logic.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import gpupool

SRC = Path(gpupool.__file__).parent
#: where no engine may be named (files or folders under src/gpupool)
GUARDED = (
    "engines/common",
    "server",
    "web",
    "jupyterhub",
    "agent",
)
ENGINE_WORD = re.compile(r"(?i)(?<![a-z])(kubernetes|kube\w*|k8s|slurm\w*|pods?)(?![a-z])")
#: API and report field names: identifiers or words of strings that may contain an engine word
FIELDS = {"pod_spec", "set_pod_spec", "pod_uid", "slurm_job_id", "pod"}
#: (file, word) still allowed, each with its reason; keep this list short
KNOWN = {
    # the hub's KubeSpawner-based spawner: builds the notebook's pod template (`pod_spec`)
    # from KubeSpawner's own settings for engines that take one
    "jupyterhub/kubespawner.py": "the KubeSpawner-based spawner for pod templates",
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if (
            isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            out.add(id(body[0].value))
    return out


def _words(n: ast.AST, docs: set[int]) -> list[str]:
    if isinstance(n, ast.Name):
        return [n.id]
    if isinstance(n, ast.Attribute):
        return [n.attr]
    if isinstance(n, ast.arg):
        return [n.arg]
    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [n.name]
    if isinstance(n, ast.keyword) and n.arg:
        return [n.arg]
    if isinstance(n, ast.alias):
        return [n.name, n.asname or ""]
    if isinstance(n, ast.ImportFrom):
        return [n.module or ""]
    if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
        return re.split(r"[^A-Za-z0-9_.]+", n.value)
    return []


def engine_words(path: Path) -> Iterator[tuple[int, str]]:
    """(line, word) of every engine word in `path`'s code, field names left out."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    for n in ast.walk(tree):
        for word in _words(n, docs):
            for part in word.split("."):
                if part not in FIELDS and ENGINE_WORD.search(part):
                    yield getattr(n, "lineno", 0), part


def _guarded_files() -> list[Path]:
    out: list[Path] = []
    for where in GUARDED:
        p = SRC / where
        out.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    return out


def test_no_engine_is_named_in_the_contract_server_web_hub_or_agent():
    found = [
        f"{path.relative_to(SRC)}:{line}: {word}"
        for path in _guarded_files()
        if str(path.relative_to(SRC)) not in KNOWN
        for line, word in engine_words(path)
    ]
    assert not found, "engine names where only the contract may be used:\n" + "\n".join(found)


def test_the_guard_finds_engine_logic_and_spares_fields_and_docstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Docstrings may say Kubernetes or Slurm."""\n'
        "# comments too: pods\n"
        "def f(ex, body):\n"
        '    """On Slurm, ..."""\n'
        "    ex.pod_workloads()\n"
        '    if ex.name == "slurm":\n'
        "        return body.pod_spec, body.pod_uid\n"
        '    return {"slurm_job_id": 1, "pod": 2, "msg": "needs the k8s engine"}\n'
    )
    assert sorted(w for _, w in engine_words(sample)) == ["k8s", "pod_workloads", "slurm"]
