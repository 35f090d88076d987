"""Extra local stacks for integration tests: a temporary home and free ports of their own.

They run beside the session's shared stack (``conftest.stack``) and share its
fetched jars, so starting one costs JVM start-up, not a Maven run.
"""

from __future__ import annotations

import random
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.settings import Settings, StackSettings, load_settings
from pipeline.stack import layout, manager
from pipeline.stack.jars import jars_dir


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_base(brokers: int, step: int) -> int:
    """A base port whose derived node ports (+0/+1/+2 per node, step apart) are all free."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20_000, 60_000, 10)
        ports = [base + 5]  # redis
        ports += [base + node * step + k for node in range(brokers) for k in range(3)]
        if all(_free(port) for port in ports):
            return base
    raise RuntimeError("no free ports for a test stack")


def isolated_settings(home: Path, brokers: int, secure: bool) -> Settings:
    """Settings for a stack under ``home`` on free ports, laid out as ``up`` lays it out."""
    shared = load_settings()
    step = shared.stack.node_port_step
    base = _free_base(brokers, step)
    stack = StackSettings.model_validate(
        {
            **{name: getattr(shared.stack, name) for name in StackSettings.model_fields},
            "home": home,
            "jars_dir": jars_dir(shared),
            "kafka_port": base,
            "kafka_controller_port": base + 1,
            "kafka_ssl_port": base + 2,
            "redis_port": base + 5,
        }
    )
    return layout.with_layout(Settings(stack=stack), brokers=brokers, secure=secure)


def _report(line: str) -> None:
    print(f"[test stack] {line}", file=sys.stderr)


@contextmanager
def running_stack(home: Path, brokers: int, secure: bool) -> Iterator[Settings]:
    """Start a stack (``babelstream up``'s own code), yield its settings, always stop it."""
    settings = isolated_settings(home, brokers, secure)
    try:
        manager.up(settings, _report)
        yield settings
    finally:
        manager.down(settings, _report)
