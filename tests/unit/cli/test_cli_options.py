"""Every option says what it is for; tables have headers; `status` words for stopped services."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import click
import pytest
from click.testing import CliRunner

from pipeline.cli.commands import client as client_commands
from pipeline.cli.commands.options import Duration, Instant
from pipeline.cli.commands.stack import _service_line
from pipeline.cli.main import main
from pipeline.stack.manager import ServiceStatus


def commands(group: click.Group, path: str) -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield f"{path} {name}", command
        if isinstance(command, click.Group):
            yield from commands(command, f"{path} {name}")


def test_every_option_has_help() -> None:
    missing = [
        f"{path} {param.opts[0]}"
        for path, command in commands(main, "babelstream")
        for param in command.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert len(list(commands(main, "babelstream"))) > 20
    assert missing == []


_DURATION_NAMES = re.compile(
    r"^--((level|phase)-)?seconds$|^--(timeout|wait|since|until-idle|window|slide|watermark"
    r"|trigger)$"
)


def test_every_duration_option_takes_the_one_duration_type() -> None:
    """Bare numbers are seconds and units are read the same way in every command."""
    durations = {
        f"{path} {param.opts[0]}": param.type
        for path, command in commands(main, "babelstream")
        for param in command.params
        if isinstance(param, click.Option) and _DURATION_NAMES.search(param.opts[0])
    }
    assert len(durations) >= 12, durations
    wrong = [name for name, kind in durations.items() if not isinstance(kind, Duration | Instant)]
    assert wrong == []


def test_models_list_has_a_header_row() -> None:
    result = CliRunner().invoke(main, ["models", "list"])
    assert result.exit_code == 0, result.output
    header, first = result.stdout.splitlines()[1:3]
    assert header.split() == ["PAIR", "MODEL", "COMPUTE", "FILES", "SOURCE", "LICENCE"]
    assert first.split()[0] == "en_en-XA" and first.split()[3] == "ok"


def test_status_words_for_each_state_of_a_service() -> None:
    def line(pid: int | None, healthy: bool) -> str:
        return _service_line(ServiceStatus("kafka", "127.0.0.1:9092", None, pid, healthy, ""))

    assert "pid 42" in line(42, True)
    assert "not started by us" in line(None, True)  # someone else's broker on our port
    down = line(None, False)  # after `babelstream down`
    assert "DOWN" in down and "not running" in down and "not started by us" not in down


def test_fidelity_options_reach_the_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """--text-format, --glossary and --term become the request's format, glossary and terms."""

    sent: list[Any] = []

    class Refused(Exception):
        pass

    def stop_before_kafka(requests: list[Any], _limits: object) -> None:
        sent.extend(requests)
        raise Refused

    monkeypatch.setattr(client_commands, "check_sendable", stop_before_kafka)
    args = [
        "submit", "--src", "en", "--tgt", "en-XA", "--text-format", "html",
        "--glossary", "default", "--term", "Kafka", "--term", "train station = Bahnhof",
        "<b>Kafka</b> at the train station",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert isinstance(result.exception, Refused), result.output
    (request,) = sent
    assert (request.format, request.glossary) == ("html", "default")
    assert [(t.source, t.target) for t in request.terms] == [
        ("Kafka", None),
        ("train station", "Bahnhof"),
    ]
