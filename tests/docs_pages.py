"""The documentation's Markdown pages and the shell commands their code blocks show.

Shared by the unit tests (every command parses, every setting exists) and the
integration test that runs the commands of Getting started and the runbook.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from pipeline.settings import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"
# pages that record the past as it was (their commands and settings may be gone since)
HISTORICAL = {DOCS / "performance" / "history.md", DOCS / "changelog.md"}

_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.M | re.S)
# blocks marked as shell; unmarked blocks show output (a command shown in one is checked);
# blocks marked as text are a program's output verbatim, never a command
_SHELL_FENCE = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```", re.M | re.S)
_INLINE = re.compile(r"`([^`]*babelstream [^`]*)`")
_PROGRAM = re.compile(r"^(?:\S*/)?babelstream$")
_HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?\s*$")


def current_pages() -> list[Path]:
    """README and every page under docs/ that describes the software as it is now."""
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    return [p for p in pages if p not in HISTORICAL]


def code_blocks(text: str) -> list[str]:
    """The fenced code blocks of a Markdown text, but for those marked ``text``."""
    return [body for info, body in _FENCE.findall(text) if info.strip() != "text"]


@dataclass(frozen=True)
class ShellCommand:
    """One command of a code block: its text (heredoc included) and its page."""

    text: str
    page: str

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0]


def shell_commands(page: Path) -> list[ShellCommand]:
    """Every command of the page's shell code blocks (```sh), in order: one per line, a
    line continued with ``\\`` joined, a heredoc kept with its command; comments left out."""
    commands = []
    name = str(page.relative_to(PROJECT_ROOT))
    for block in _SHELL_FENCE.findall(page.read_text(encoding="utf-8")):
        lines = re.sub(r"\\\n\s*", " ", block).splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            heredoc = _HEREDOC.search(line)
            if heredoc:
                body = [line]
                while i < len(lines):
                    body.append(lines[i])
                    i += 1
                    if lines[i - 1].strip() == heredoc.group(1):
                        break
                commands.append(ShellCommand("\n".join(body), name))
            else:
                commands.append(ShellCommand(line, name))
    return commands


def _command_lines(text: str) -> list[str]:
    """Every ``babelstream ...`` line of a text's code blocks and inline code."""
    lines = []
    for block in code_blocks(text):
        joined = re.sub(r"\\\n\s*", " ", block)  # shell line continuations
        lines += [line for line in joined.splitlines() if "babelstream " in line]
    prose = _FENCE.sub("", text)
    lines += [" ".join(span.split()) for span in _INLINE.findall(prose)]
    return lines


def babelstream_invocations(text: str) -> list[list[str]]:
    """Each ``babelstream`` command of a text as argv after the program name (env
    assignments, comments and redirections dropped; ``a|b`` choices and ``[--opt X]``
    synopses kept as tokens; each command of a ``a && b`` or ``a | b`` line)."""
    commands = []
    for line in _command_lines(text):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # prose around an inline span, not a command
            continue
        segment: list[str] = []
        for token in [*tokens, "&&"]:
            if token in {"&&", "|", ";"}:
                starts = [i for i, t in enumerate(segment) if _PROGRAM.match(t)]
                if starts:
                    args = segment[starts[0] + 1 :]
                    cut = next((i for i, t in enumerate(args) if t in {">", "<"}), len(args))
                    commands.append(args[:cut])
                segment = []
            else:
                segment.append(token)
    return commands
