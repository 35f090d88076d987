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


# --- command samples and the output they show ---------------------------------------------

# a shell block followed by the text block of its output
_SAMPLE = re.compile(r"^```sh\n((?:(?!```).)*?)^```\n\n```text\n(.*?)^```", re.M | re.S)
# an output block that opens with the command typed at a prompt: "$ command" then its output
_TRANSCRIPT = re.compile(r"^```\n\$ ([^\n]*)\n(.*?)^```", re.M | re.S)
# in an expected output, a line of its own standing for any lines (none included)
ELLIPSIS = "..."
# what differs from run to run, or machine to machine, in order: the project's folder
# (pages say /path/to/babelstream), ids and digests, a Kafka cluster's id, a result's
# cache level and worker, then every number
_PADDING = re.compile(r"(?<=\S) {2,}")
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(re.escape(str(PROJECT_ROOT))), "/path/to/babelstream"),
    (re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{12,}\b"), "<id>"),
    (re.compile(r"\bcluster [A-Za-z0-9_-]{22}\b"), "cluster <id>"),
    (re.compile(r'"cache":"[a-z0-9]+"'), '"cache":"<cache>"'),
    (re.compile(r'"worker":"[^"]*"'), '"worker":"<worker>"'),
    (re.compile(r"\d+(?:\.\d+)?"), "N"),
)


@dataclass(frozen=True)
class CommandSample:
    """Commands a page shows and the output it shows for them."""

    commands: str
    expected: str
    page: str


def command_samples(page: Path) -> list[CommandSample]:
    """The page's samples: each shell block followed by a ``text`` block (its output),
    and each output block opening with ``$ command``, in page order."""
    text = page.read_text(encoding="utf-8")
    name = str(page.relative_to(PROJECT_ROOT) if page.is_relative_to(PROJECT_ROOT) else page)
    found = [(m.start(), m.group(1), m.group(2)) for m in _SAMPLE.finditer(text)]
    found += [(m.start(), m.group(1) + "\n", m.group(2)) for m in _TRANSCRIPT.finditer(text)]
    return [CommandSample(c, e, name) for _, c, e in sorted(found)]


def masked(text: str) -> str:
    """``text`` with what differs between runs replaced (:data:`_MASKS`), line ends trimmed."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    # columns padded to the width of a masked figure are compared as one space
    return "\n".join(_PADDING.sub(" ", line.rstrip()) for line in text.strip("\n").splitlines())


def output_differs(expected: str, actual: str) -> str | None:
    """None when ``actual`` prints what ``expected`` shows, both masked, an
    :data:`ELLIPSIS` line standing for any lines; else the first line that differs."""
    want, got = masked(expected).splitlines(), masked(actual).splitlines()

    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(got)
        if want[i] == ELLIPSIS:
            return any(match(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and want[i] == got[j] and match(i + 1, j + 1)

    if match(0, 0):
        return None
    for i, line in enumerate(want):
        if line != ELLIPSIS and line not in got:
            return f"expected line {i + 1} not printed: {line!r}\nprinted (masked):\n" + "\n".join(
                got
            )
    return "the lines are printed in another order, or more were printed:\n" + "\n".join(got)
