"""The README matches the code: its settings exist and its command lines parse.

(The settings docker-compose.yml passes to the containers are checked the same way.)
"""

from __future__ import annotations

import re
import shlex

import click
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.settings import CONFIG_VARIABLE, PROJECT_ROOT, setting_variables

README = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
COMPOSE = (PROJECT_ROOT / "docker-compose.yml").read_text(encoding="utf-8")

# a name, not a pattern such as BABELSTREAM_<SECTION>__<FIELD> or BABELSTREAM_STACK__*_PORT
_VARIABLE = re.compile(r"BABELSTREAM_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_<*])")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
_INLINE = re.compile(r"`([^`]*babelstream [^`]*)`")
_PROGRAM = re.compile(r"^(?:\S*/)?babelstream$")


def documented_variables() -> list[str]:
    return sorted(set(_VARIABLE.findall(README)) | set(_VARIABLE.findall(COMPOSE)))


def _command_lines() -> list[str]:
    """Every ``babelstream ...`` line of the README's code blocks and inline code."""
    lines = []
    for block in _FENCE.findall(README):
        joined = re.sub(r"\\\n\s*", " ", block)  # shell line continuations
        lines += [line for line in joined.splitlines() if "babelstream " in line]
    prose = _FENCE.sub("", README)
    lines += [" ".join(span.split()) for span in _INLINE.findall(prose)]
    return lines


def readme_commands() -> list[list[str]]:
    """Each README command as argv after the program name (env assignments, comments and
    redirections dropped; ``a|b`` choices and ``[--opt X]`` synopses kept as tokens)."""
    commands = []
    for line in _command_lines():
        tokens = shlex.split(line, comments=True)
        starts = [i for i, t in enumerate(tokens) if _PROGRAM.match(t)]
        if not starts:
            continue
        args = tokens[starts[0] + 1 :]
        cut = next((i for i, t in enumerate(args) if t in {">", "|", "<", "&&"}), len(args))
        commands.append(args[:cut])
    return commands


def _resolve(args: list[str]) -> tuple[list[str], click.Command, list[str]]:
    """(sub-command path, its command, the rest of the arguments)."""
    command: click.Command = main
    path: list[str] = []
    rest = list(args)
    ctx = click.Context(main)
    while isinstance(command, click.Group) and rest:
        if rest[0].startswith("-"):  # a root option such as -v
            rest.pop(0)
            continue
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            break
        path.append(rest.pop(0))
        command = sub
    return path, command, rest


def test_the_readme_shows_commands_and_settings() -> None:
    assert len(readme_commands()) >= 20
    assert len(documented_variables()) >= 15


@pytest.mark.parametrize("name", documented_variables())
def test_every_documented_setting_exists(name: str) -> None:
    assert name in setting_variables() or name == CONFIG_VARIABLE, f"{name} is no setting"


@pytest.mark.parametrize("args", readme_commands(), ids=" ".join)
def test_every_command_in_the_readme_parses(args: list[str]) -> None:
    path, command, rest = _resolve(args)
    assert path, f"{args}: no such command"
    assert not isinstance(command, click.Group) or command.invoke_without_command, (
        f"{args}: {path} needs a sub-command"
    )
    options = {
        opt
        for p in command.params
        for opt in (*p.opts, *p.secondary_opts)
        if isinstance(p, click.Option)
    }
    shown = {t.strip("[]").split("=")[0] for t in rest if t.strip("[").startswith("-")}
    assert shown <= options, f"{' '.join(args)}: no such option {sorted(shown - options)}"
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
