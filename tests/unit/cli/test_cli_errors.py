"""Ordinary mistakes and absent services: one line on stderr, an exit code, no traceback.

Kafka is pointed at a port nothing listens on, so these tests need no
services: a command that got past its checks would fail with 69, not hang.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pipeline.cli.main import main
from pipeline.errors import EXIT_UNAVAILABLE, EXIT_USAGE


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


NO_KAFKA = f"127.0.0.1:{_closed_port()}"
ENV = {"BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": NO_KAFKA}
TRANSLATE = ["translate", "--src", "en", "--tgt", "en-XA"]
SUBMIT = ["submit", "--src", "en", "--tgt", "en-XA"]


def run(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, args, env={**ENV, **(env or {})})


def one_line(result: Result, code: int) -> str:
    """The single stderr line of a failed command (and nothing on stdout)."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert lines[0].startswith("Error: ")
    return lines[0]


@pytest.fixture
def listening() -> Iterator[int]:
    """A port something already listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([*TRANSLATE[:2], "english", "--tgt", "de", "hi"], ["--src", "english", "BCP-47"]),
        ([*TRANSLATE, "--timeout", "0", "hi"], ["--timeout", "0 s", "100..3600000 ms"]),
        ([*TRANSLATE, "--timeout", "-1", "hi"], ["--timeout", "'-1' is negative"]),
        ([*TRANSLATE, "--timeout", "10x", "hi"], ["--timeout", "'10x' is not a duration", "10s"]),
        ([*SUBMIT, "--timeout", "0.05", "hi"], ["--timeout", "0.05 s", "100..3600000 ms"]),
        ([*SUBMIT, "--timeout", "1s", "--timeout-ms", "900", "hi"], ["--timeout or --timeout-ms"]),
        (["results", "r-1", "--wait", "soon"], ["--wait", "'soon' is not a duration"]),
        (
            ["bench", "interference", "--seconds", "0.5"],
            ["--seconds", "'0.5' is too short: give at least 1s"],
        ),
        (["dlq", "list", "--since", "yesterday"], ["--since", "'yesterday' is not a time"]),
        ([*SUBMIT, "--timeout-ms", "50", "hi"], ["--timeout-ms", "50 ms", "100..3600000"]),
        ([*SUBMIT, "--file", "/no/such/file"], ["--file", "/no/such/file", "does not exist"]),
        ([*TRANSLATE, "--tenant", "t" * 65, "hi"], ["--tenant", "1 to 64 characters"]),
        ([*TRANSLATE, "x" * 16_385], ["text 1", "at most 16384 characters"]),
        # under the schema's 16,384 characters, over the 16 KiB UTF-8 limit: refused before sending
        (
            [*TRANSLATE, "é" * 15_200],
            ["text 1", "30400 bytes of UTF-8", "16384", "nothing was sent"],
        ),
        ([*SUBMIT], ["give TEXT arguments or --file"]),
        ([*SUBMIT, "--term", "=Bahnhof", "hi"], ["--term", "'=Bahnhof'", "SOURCE=TARGET"]),
        ([*TRANSLATE, "--term", "Bahnhof=", "hi"], ["--term", "SOURCE alone"]),
        ([*TRANSLATE, "--text-format", "rtf", "hi"], ["--text-format", "rtf", "html"]),
        (["results"], ["REQUEST_IDS"]),
        (["results", "r-1", "--since", "yesterday"], ["--since", "yesterday"]),
        (
            ["worker", "--router-only", "--no-router"],
            ["--router-only", "--no-router", "contradict"],
        ),
        (["worker", "--no-router", "--router-only"], ["contradict"]),
        (["worker", "--pairs", "en_de"], ["en_de", "registry.toml", "en_en-XA"]),
        (["dashboard", "--port", "99999"], ["--port", "99999", "65535"]),
        (["translat"], ["No such command", "translat"]),
        (
            ["bulk", "run", "/no/such/corpus", "--src", "en", "--tgt", "de", "-o", "x.parquet"],
            ["/no/such/corpus", "does not exist"],
        ),
    ],
)
def test_ordinary_mistakes(args: list[str], words: list[str]) -> None:
    line = one_line(run(args), EXIT_USAGE)
    for word in words:
        assert word in line, line


def test_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    latin1 = tmp_path / "texts.txt"
    latin1.write_bytes("café\n".encode("latin-1"))
    line = one_line(run([*SUBMIT, "--file", str(latin1)]), EXIT_USAGE)
    assert "--file" in line and "not UTF-8" in line


def test_a_dashboard_port_in_use(listening: int) -> None:
    line = one_line(run(["dashboard", "--port", str(listening)]), EXIT_USAGE)
    assert f"127.0.0.1:{listening}" in line and "--port" in line


@pytest.mark.parametrize(
    ("variable", "closest"),
    [
        ("BABELSTREAM_KAFKA__BOOTSTRAP_SERVER", "BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS"),
        ("BABELSTREAM_OBSERVABILITY__CONSOLE_SPANS", "BABELSTREAM_OBSERVABILITY__CONSOLE_EXPORTER"),
        ("BABELSTREAM_WORKR__WEB_PORT", "BABELSTREAM_WORKER__WEB_PORT"),
    ],
)
def test_a_misspelled_setting_names_the_closest(variable: str, closest: str) -> None:
    line = one_line(run(["models", "list"], env={variable: "1"}), EXIT_USAGE)
    assert f"unknown setting {variable}; did you mean {closest}?" in line


def test_an_invalid_setting_names_its_variable() -> None:
    line = one_line(
        run(["models", "list"], env={"BABELSTREAM_KAFKA__REQUEST_TIMEOUT_MS": "soon"}), EXIT_USAGE
    )
    assert "BABELSTREAM_KAFKA__REQUEST_TIMEOUT_MS=soon" in line and "integer" in line


@pytest.mark.parametrize(
    "args",
    [
        [*TRANSLATE, "hi"],
        [*SUBMIT, "hi"],
        ["results", "r-1"],
        ["dashboard", "--port", "0"],
        ["sla", "--until-idle", "1s"],
        ["bench", "e2e", "--requests", "1"],
        ["bench", "sla", "--results", "1"],
    ],
)
def test_kafka_down_is_one_line_within_seconds(args: list[str]) -> None:
    started = time.monotonic()
    line = one_line(run(args), EXIT_UNAVAILABLE)
    assert time.monotonic() - started < 10
    assert f"Kafka is not reachable at {NO_KAFKA}" in line and "babelstream up" in line


def test_bulk_run_with_kafka_down(tmp_path: Path) -> None:
    corpus = tmp_path / "doc.txt"
    corpus.write_text("Hello world.\n", encoding="utf-8")
    args = f"bulk run {corpus} --src en --tgt en-XA -o {tmp_path / 'out.parquet'}"
    result = run(args.split(), env={"BABELSTREAM_BULK__STATE_DIR": str(tmp_path / "state")})
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    assert result.stderr.strip().splitlines()[-1].startswith("Error: Kafka is not reachable")
    assert "Traceback" not in result.output


def test_an_unreachable_spark_master(listening: int) -> None:
    # Kafka "answers" (something listens), the spark:// master does not
    result = run(
        ["bulk", "spark-assemble", "--job-id", "j", "-o", "out", "--master", f"spark://{NO_KAFKA}"],
        env={"BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{listening}"},
    )
    line = one_line(result, EXIT_UNAVAILABLE)
    assert f"Spark master spark://{NO_KAFKA} is not reachable" in line


def test_verbose_adds_the_traceback() -> None:
    result = run(["-v", *TRANSLATE, "hi"])
    assert result.exit_code == EXIT_UNAVAILABLE
    assert "Traceback" in result.stderr and "ServiceUnavailable" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: Kafka is not reachable")


def test_help_still_exits_zero() -> None:
    result = run(["translate", "--help"])
    assert result.exit_code == 0 and "--tenant" in result.stdout


@pytest.mark.parametrize(
    ("args", "env", "code", "words"),
    [
        (
            ["models", "list"],
            {"BABELSTREAM_KAFKA__BOOTSTRAP_SERVER": "x"},
            EXIT_USAGE,
            ["did you mean BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS?"],
        ),
        ([*TRANSLATE[:2], "english", "--tgt", "de", "hi"], {}, EXIT_USAGE, ["BCP-47"]),
        ([*TRANSLATE, "hi"], {}, EXIT_UNAVAILABLE, ["Kafka is not reachable", "babelstream up"]),
        (["worker", "--pairs", "en_de"], {}, EXIT_USAGE, ["en_de"]),
    ],
)
def test_the_installed_command(
    args: list[str], env: dict[str, str], code: int, words: list[str]
) -> None:
    """The same through the console script the docs show, as a user runs it."""
    program = Path(sys.executable).with_name("babelstream")
    result = subprocess.run(
        [str(program), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **ENV, **env},
    )
    assert result.returncode == code, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0]


def test_client_errors_that_mean_kafka_is_not_there() -> None:
    from aiokafka.errors import KafkaConnectionError as AioConnectionError
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError

    from pipeline.kafka.reachability import as_unavailable
    from pipeline.settings import KafkaSettings

    kafka = KafkaSettings(bootstrap_servers="k1:9092,k2:9092")
    for error in (KafkaConnectionError("refused"), AioConnectionError("Unable to bootstrap")):
        down = as_unavailable(error, kafka)
        assert down is not None
        assert str(down).startswith("Kafka is not reachable at k1:9092,k2:9092 (")
    boot = as_unavailable(KafkaTimeoutError("Unable to bootstrap from ['k1:9092']"), kafka)
    assert boot is not None and "not reachable" in str(boot)
    slow = as_unavailable(KafkaTimeoutError("Failed to update metadata after 60.0 secs."), kafka)
    assert slow is not None and "did not answer in time (Failed to update metadata" in str(slow)
    assert as_unavailable(ValueError("a bug"), kafka) is None


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"BABELSTREAM_SLA__OBJECTIVES": "{p95: 3"}, ["BABELSTREAM_SLA__OBJECTIVES", "line 1"]),
        ({"BABELSTREAM_CONFIG": "/no/such/babelstream.toml"}, ["/no/such/babelstream.toml"]),
    ],
)
def test_bad_configuration_is_one_line(env: dict[str, str], words: list[str]) -> None:
    line = one_line(run(["status"], env=env), EXIT_USAGE)
    for word in words:
        assert word in line, line


def test_a_config_file_that_is_not_toml(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[worker\nmax_messages = 8\n")
    line = one_line(run(["status"], env={"BABELSTREAM_CONFIG": str(config)}), EXIT_USAGE)
    assert str(config) in line and "line 1, column 8" in line, line


@pytest.mark.parametrize(
    "args",
    [
        [*TRANSLATE, "--timeout", "10s", "hi"],
        [*TRANSLATE, "--timeout", "10", "hi"],
        [*SUBMIT, "--timeout", "1m", "hi"],
        [*SUBMIT, "--timeout-ms", "5000", "hi"],  # the spelling before --timeout
        ["results", "r-1", "--wait", "30", "--since", "2"],
        ["results", "r-1", "--wait", "500ms", "--since", "2h"],
    ],
)
def test_durations_take_a_unit_or_bare_seconds(args: list[str]) -> None:
    """Past option parsing: Kafka down is the only complaint (exit 69, not 2)."""
    one_line(run(args), EXIT_UNAVAILABLE)


@pytest.fixture
def glossary_file(tmp_path: Path) -> Path:
    terms = tmp_path / "terms.tsv"
    terms.write_text("Kafka\ntrain station\tBahnhof\n", encoding="utf-8")
    return terms


def test_glossary_mistakes_are_usage_mistakes(tmp_path: Path, glossary_file: Path) -> None:
    empty = tmp_path / "empty.tsv"
    empty.write_text("# nothing\n", encoding="utf-8")
    put = ["glossary", "put", "--tenant", "acme"]
    line = one_line(run([*put, "--pair", "en_en-XA", str(empty)]), EXIT_USAGE)
    assert f"{empty}: no terms" in line
    line = one_line(run([*put, "--pair", "en_xx", str(glossary_file)]), EXIT_USAGE)
    assert "--pair" in line and "no model serves en_xx" in line and "en_en-XA" in line, line
    assert "babelstream models add argos --pair en_xx" in line, line


def test_glossary_with_redis_down_is_unavailable(glossary_file: Path) -> None:
    env = {"BABELSTREAM_REDIS__URL": f"redis://{NO_KAFKA}/0"}
    args = ["glossary", "put", "--tenant", "acme", "--pair", "en_en-XA", str(glossary_file)]
    line = one_line(run(args, env=env), EXIT_UNAVAILABLE)
    assert "cannot reach Redis" in line and "BABELSTREAM_REDIS__URL" in line


def test_bulk_mistakes_are_usage_mistakes(tmp_path: Path) -> None:
    state = {"BABELSTREAM_BULK__STATE_DIR": str(tmp_path / "state")}
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("Hello\n", encoding="utf-8")
    out = str(tmp_path / "out.parquet")
    line = one_line(run(["bulk", "status", "nojob"], env=state), EXIT_USAGE)
    assert "no bulk job 'nojob'" in line
    bulk_run = ["bulk", "run", str(corpus), "--src", "en", "--tgt", "en-XA", "-o", out]
    line = one_line(run(bulk_run, env=state), EXIT_USAGE)
    assert "unknown file type '.tsv'" in line
    line = one_line(run([*bulk_run, "--format", "parquet"], env=state), EXIT_USAGE)
    assert f"{corpus}: not Parquet" in line
    other_pair = ["bulk", "run", str(corpus), "--src", "en", "--tgt", "de", "-o", out]
    line = one_line(run([*other_pair, "--format", "text"], env=state), EXIT_USAGE)
    assert "no model serves pair en_de" in line


def test_a_worker_port_in_use_is_a_usage_mistake(listening: int) -> None:
    env = {"BABELSTREAM_WORKER__WEB_PORT": str(listening)}
    line = one_line(run(["worker", "--router-only"], env=env), EXIT_USAGE)
    assert f"127.0.0.1:{listening} is in use" in line and "BABELSTREAM_WORKER__WEB_PORT" in line


def test_stack_mistakes_are_usage_mistakes(tmp_path: Path) -> None:
    home = {"BABELSTREAM_STACK__HOME": str(tmp_path / "stack")}
    env = {**home, "BABELSTREAM_KAFKA__REPLICATION_FACTOR": "3"}
    line = one_line(run(["up", "--brokers", "2"], env=env), EXIT_USAGE)
    assert "kafka.replication_factor is 3 but the stack has 2 broker(s)" in line
    with socket.socket() as kafka, socket.socket() as redis:
        for sock in (kafka, redis):
            sock.bind(("127.0.0.1", 0))
            sock.listen()
        ports = {
            "BABELSTREAM_STACK__KAFKA_PORT": str(kafka.getsockname()[1]),
            "BABELSTREAM_STACK__KAFKA_CONTROLLER_PORT": str(_closed_port()),
            "BABELSTREAM_STACK__REDIS_PORT": str(redis.getsockname()[1]),
        }
        result = run(["up"], env={**home, **ports})
    assert result.exit_code == EXIT_USAGE, result.output
    assert "is taken by a process `babelstream up` did not start" in result.stderr
    assert "Traceback" not in result.output


def test_a_usage_error_that_names_where_to_look_gets_no_second_hint() -> None:
    """`keys revoke` of an unknown id said "(see `babelstream keys list`)" and then
    "(see '... --help')"; a plain usage error still points at --help."""
    import click

    from pipeline.cli.main import _one_line

    ctx = click.Context(click.Command("revoke"), info_name="babelstream keys revoke")
    named = click.BadParameter(
        "no API key with id or value 'x' (see `babelstream keys list`)",
        ctx=ctx,
        param_hint="'KEY_OR_ID'",
    )
    assert _one_line(named).count("(see ") == 1
    plain = click.BadParameter("not a number", ctx=ctx)
    assert _one_line(plain).endswith("(see 'babelstream keys revoke --help')")


def test_results_since_takes_the_times_dlq_list_takes() -> None:
    """`results --since` took a duration only (now-1h was exit 2) where `dlq list --since`
    takes times; both parse with one type now. Kafka is down here, so a time that
    parses ends at the Kafka check (69), one that does not at the option (2)."""
    for since in ("now-1h", "2h", "2026-12-05T10:00:00Z"):
        line = one_line(run(["results", "some-id", "--since", since]), EXIT_UNAVAILABLE)
        assert "Kafka" in line or "kafka" in line, line
    line = one_line(run(["results", "some-id", "--since", "last tuesday"]), EXIT_USAGE)
    assert "--since" in line
