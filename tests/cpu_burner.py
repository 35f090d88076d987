"""``--burn-cores N``: keep N cores busy for the whole test session.

The suite must hold on a machine that other work keeps busy (shared CI
runners), so its tests control timing rather than race the clock. This option
proves it: N processes spin at normal priority from the start of the session
to its end (``make test-loaded``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_SPIN = "while True: pass"
_BURNERS = pytest.StashKey[list[subprocess.Popen[bytes]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--burn-cores",
        type=int,
        default=0,
        metavar="N",
        help="keep N cores busy with spinning processes for the whole session",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # under pytest-xdist only the controlling process burns, not each test worker
    cores = (
        0 if hasattr(session.config, "workerinput") else session.config.getoption("--burn-cores")
    )
    burners = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(cores)]
    session.config.stash[_BURNERS] = burners
    if burners:
        print(f"[load] {cores} spinning process(es) keep {cores} core(s) busy", file=sys.stderr)


def pytest_sessionfinish(session: pytest.Session) -> None:
    for burner in session.config.stash.get(_BURNERS, []):
        burner.kill()
        burner.wait()
