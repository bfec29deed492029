"""Every `gpupool …` command in README.md and docs/*.md parses with the real CLI.

Commands are taken from shell code blocks (one per line, after `$ ` prompts, `VAR=value`
prefixes and `sudo`, split at `;`, `&&`, `||` and `|`, continued lines joined) and from inline
code in the prose. Each is checked with Click's own parser (`make_context`, resilient parsing
off) without running it: the subcommand path exists and every option and argument is accepted
and converts. Placeholders are given dummy values: `<anything>` and the capitalised ones in
PLACEHOLDERS; `a|b|c` in inline code is each alternative; a trailing `…` checks only the path.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

try:  # Typer vendors Click (typer._click) since 0.26; its commands raise its exceptions
    from typer import _click as click
except ImportError:  # pragma: no cover - older Typer on the real Click
    import click  # type: ignore[no-redef]

from gpupool.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Placeholders written in capitals in the docs -> a value of the type the option wants.
PLACEHOLDERS = {"N": "2", "ID": "w-0000000000", "URL": "http://127.0.0.1:8000"}
SHELL_FENCES = {"", "bash", "sh", "shell", "console", "shell-session", "text"}
OPERATORS = {";", "&&", "||", "|", "&", "(", ")"}
FENCE = re.compile(r"^\s*(```|~~~)\s*([\w-]*)")


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str
    args: tuple[str, ...]  # after `gpupool`
    #: Check only that the subcommands exist: the command ended in `…`, or inline code names
    #: a command without giving it anything (`gpupool run` prints the id).
    path_only: bool = False

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def _placeholders(text: str) -> str:
    return re.sub(r"<[^<>\s][^<>]*>", "placeholder", text)


def _tokens(text: str) -> list[str]:
    lex = shlex.shlex(_placeholders(text), posix=True, punctuation_chars=";&|()")
    lex.whitespace_split = True
    lex.commenters = "#"
    return list(lex)


def _commands(tokens: list[str]) -> list[list[str]]:
    """The simple commands of a tokenized line whose program is `gpupool`."""
    found, cur = [], []
    for t in [*tokens, ";"]:
        if t not in OPERATORS:
            cur.append(t)
            continue
        while cur and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", cur[0]) or cur[0] == "sudo"):
            cur = cur[1:]
        if cur and cur[0] == "gpupool":
            found.append(cur[1:])
        cur = []
    return found


def _doc_command(where: str, text: str, args: list[str], inline: bool = False) -> DocCommand:
    args = [PLACEHOLDERS.get(a, a) for a in args]
    for i, a in enumerate(args):
        if a in ("…", "...") or a.endswith("…"):
            return DocCommand(where, text, tuple(args[:i]), path_only=True)
    named = inline and _names_a_command(args)
    return DocCommand(where, text, tuple(args), path_only=named)


def _names_a_command(args: list[str]) -> bool:
    """Whether `args` are nothing but a path of subcommands (`run`, `tenant create`)."""
    cmd = typer.main.get_command(app)
    for a in args:
        sub = cmd.get_command(None, a) if hasattr(cmd, "get_command") else None  # type: ignore[arg-type]
        if sub is None:
            return False
        cmd = sub
    return True


def _alternatives(text: str) -> list[str]:
    """`--by user|tenant|day` -> one text per alternative (inline code only)."""
    m = re.search(r"(?<!\S)([\w.-]+(?:\|[\w.-]+)+)(?!\S)", text)
    if not m:
        return [text]
    out = []
    for alt in m.group(1).split("|"):
        out += _alternatives(text[: m.start(1)] + alt + text[m.end(1) :])
    return out


def extract(path: Path, root: Path = ROOT) -> list[DocCommand]:
    """The gpupool commands in one Markdown file (code blocks and inline code)."""
    rel = path.relative_to(root)
    found: list[DocCommand] = []
    fence: str | None = None
    prose: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for no, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if m:
            fence = m.group(2).lower() if fence is None else None
            prose.append((no, ""))
            continue
        if fence is None:
            prose.append((no, line))
            continue
        if fence not in SHELL_FENCES or "gpupool" not in line and not pending:
            continue
        if not pending:
            start = no
        line = re.sub(r"^\s*\$\s+", "", line)
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text, pending = pending + line, ""
        try:
            commands = _commands(_tokens(text))
        except ValueError as e:  # unbalanced quotes
            commands = [["<unparsable>", str(e)]]
        found += [_doc_command(f"{rel}:{start}", text.strip(), c) for c in commands]
    # Inline code may run over a line break; keep line numbers by scanning the joined prose.
    joined = "\n".join(line for _, line in prose)
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", joined):
        code = " ".join(m.group(1).split())
        if not code.startswith("gpupool "):
            continue
        no = prose[joined.count("\n", 0, m.start())][0]
        for alt in _alternatives(code):
            for c in _commands(_tokens(alt)):
                found.append(_doc_command(f"{rel}:{no}", alt, c, inline=True))
    return found


def all_commands() -> list[DocCommand]:
    return [c for p in DOCS for c in extract(p)]


def check(command: DocCommand) -> None:
    """Parse `gpupool ARGS` with the CLI's own Click commands; raise click errors."""
    cmd = typer.main.get_command(app)
    args = list(command.args)
    ctx: click.Context | None = None
    name = "gpupool"
    while True:
        group = hasattr(cmd, "resolve_command")
        if command.path_only and not args:
            return
        ctx = cmd.make_context(name, args, parent=ctx, resilient_parsing=False)
        if not group:
            return
        rest = [*ctx._protected_args, *ctx.args]
        sub_name, sub, args = cmd.resolve_command(ctx, rest)
        assert sub is not None and sub_name is not None
        cmd, name = sub, sub_name


COMMANDS = all_commands()


def test_the_docs_have_commands_to_check():
    texts = {c.text for c in COMMANDS}
    # One of each source: a code block, a `$ ` prompt, inline code across a line break.
    assert "gpupool tenant create physics" in texts
    assert "gpupool devices --json               # the full snapshot as JSON" in texts
    assert any(c.args[:2] == ("user", "create") and "--unix-user" in c.args for c in COMMANDS)
    assert len(COMMANDS) > 60


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_doc_command_parses(command: DocCommand):
    try:
        check(command)
    except click.ClickException as e:
        pytest.fail(f"{command}\n  -> {e.format_message()}")


def test_the_checker_catches_what_the_cli_refuses():
    bad = [
        ("tenant", "set-quota", "lab-a", "--idle-timeoot", "7200"),  # no such option
        ("tenant", "rename", "lab-a"),  # no such command
        ("run", "--gpus", "two", "--", "x"),  # not an int
        ("show",),  # missing argument
        ("ls", "-o", "tall"),  # not a choice
    ]
    for args in bad:
        with pytest.raises(click.ClickException):
            check(DocCommand("test", " ".join(args), args))
    with pytest.raises(click.ClickException):  # a named command must exist too
        check(DocCommand("test", "gpupool tenant rename …", ("tenant", "rename"), path_only=True))
    check(DocCommand("test", "", ("tenant", "set-quota", "lab-a", "--idle-timeout", "7200")))
    check(DocCommand("test", "", ("user", "create", "alice", "--tenant", "lab-a")))


def test_extraction_of_shell_and_inline_forms(tmp_path):
    doc = tmp_path / "docs" / "x.md"
    doc.parent.mkdir()
    doc.write_text(
        "Use `gpupool usage --by user|day` or `gpupool show <workload>`, or\n"
        "`gpupool profile …`, not `gpupool_session` nor `gpupool.cli`.\n\n"
        "```bash\n"
        "$ GPUPOOL_URL=http://x gpupool ls -a; echo gpupool && gpupool queue  # gpupool ls\n"
        "gpupool simulate --trace t.csv \\\n"
        "   --json\n"
        "```\n\n"
        "```python\n"
        "gpupool up\n"
        "```\n"
    )
    got = [(c.where, c.args, c.path_only) for c in extract(doc, tmp_path)]
    assert got == [
        ("docs/x.md:5", ("ls", "-a"), False),
        ("docs/x.md:5", ("queue",), False),
        ("docs/x.md:6", ("simulate", "--trace", "t.csv", "--json"), False),
        ("docs/x.md:1", ("usage", "--by", "user"), False),
        ("docs/x.md:1", ("usage", "--by", "day"), False),
        ("docs/x.md:1", ("show", "placeholder"), False),
        ("docs/x.md:2", ("profile",), True),
    ]
