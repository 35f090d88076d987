"""The bulk-memory bench measures the child's own peak, not its parent's."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.bench.bulk_memory import run_bulk_measured

PARENT_MB = 400


def test_a_small_child_of_a_large_parent_reports_its_own_peak(tmp_path: Path) -> None:
    # Touch every page so the parent's resident set really is this large: a
    # rusage-based peak would report at least this much for any child.
    ballast = bytearray(PARENT_MB << 20)
    ballast[::4096] = b"\x01" * len(ballast[::4096])
    command = [sys.executable, "-c", "import time; b = bytearray(60 << 20); time.sleep(0.5)"]
    code, peak_mb, _ = run_bulk_measured(command, {}, tmp_path / "child.log", timeout_s=30)
    assert code == 0
    assert 60 < peak_mb < PARENT_MB / 2, peak_mb
    del ballast
