"""Which kafka-python log records are demoted as close-time noise, and which are not."""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator

import pytest

from pipeline.kafka.clients import quiet_client_noise


@pytest.fixture(autouse=True)
def kafka_logs_enabled() -> Iterator[None]:
    """Every record reaches caplog, whatever level another test left on ``kafka``."""
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.NOTSET)
    yield
    logger.setLevel(level)


def _generator_already_executing() -> ValueError:
    """The real error: a generator closed while it is running (what kafka-python's close hits)."""

    def step() -> Generator[None, None, None]:
        running.close()
        yield

    running = step()
    try:
        next(running)
    except ValueError as error:
        return error
    raise AssertionError("closing a running generator did not raise")


def _log_close_error(error: BaseException) -> None:
    log = logging.getLogger("kafka.net.selector")
    try:
        raise error
    except BaseException:
        log.exception("Error closing coroutine for cancelled task")


def test_closing_a_running_task_is_demoted(caplog: pytest.LogCaptureFixture) -> None:
    quiet_client_noise()
    caplog.set_level(logging.WARNING)
    _log_close_error(_generator_already_executing())
    assert caplog.records == []


def test_other_close_errors_still_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    quiet_client_noise()
    caplog.set_level(logging.WARNING)
    _log_close_error(ValueError("something else went wrong"))
    assert [r.levelno for r in caplog.records] == [logging.ERROR]


def _log_metadata_failure(error: BaseException) -> None:
    logging.getLogger("kafka.cluster").error("Metadata refresh: failed %s", error)


def test_a_refresh_on_a_closing_connection_is_demoted(caplog: pytest.LogCaptureFixture) -> None:
    quiet_client_noise()
    caplog.set_level(logging.WARNING)
    _log_metadata_failure(RuntimeError("Transport closed for writes"))
    assert caplog.records == []


def test_other_metadata_failures_still_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    quiet_client_noise()
    caplog.set_level(logging.WARNING)
    _log_metadata_failure(RuntimeError("something else went wrong"))
    _log_metadata_failure(TimeoutError("Transport closed for writes"))
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.ERROR]
