"""Progress on stderr that also reaches logs: a live tqdm bar on a terminal, lines otherwise.

tqdm disables itself when its output is not a terminal, so a scheduled job
(``bulk run``, ``bench ...`` redirected to a file) showed nothing for
minutes. Off a terminal the same tqdm bar prints one plain line (counts,
rate, ETA) at most every :data:`LINE_INTERVAL_S` seconds while it moves,
and a last one when it closes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import IO, Any

from tqdm import tqdm

Reporter = Callable[[str], None]
"""Receives one line of progress at a time (``click.echo``, ``print``, ``list.append``)."""


def quiet(_: str) -> None:
    """A reporter that stays silent."""


# seconds between two progress lines off a terminal
LINE_INTERVAL_S = 5.0
_LINE_FORMAT = (
    "{desc}: {n_fmt}/{total_fmt} ({percentage:.0f}%), {rate_fmt}, "
    "{elapsed} elapsed, ETA {remaining}{postfix}"
)
_OPEN_LINE_FORMAT = "{desc}: {n_fmt}, {rate_fmt}, {elapsed} elapsed{postfix}"
# tqdm redraws with \r, moves between bars with \n and ESC[A; a log wants none of them
_CONTROL = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|[\r\n]")


class _Lines:
    """A text stream that turns tqdm's redraws into one line each."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        line = _CONTROL.sub("", text).strip()
        if line:
            self._stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


def progress_bar(
    desc: str,
    total: int | None = None,
    unit: str = "it",
    enabled: bool | None = None,
    **options: Any,
) -> tqdm[Any]:
    """A tqdm bar on stderr for ``total`` units (None: unknown).

    ``enabled``: None shows it (a live bar on a terminal, lines in a log),
    False hides it. ``options`` go to tqdm (``position``, ``leave``, ...).
    """
    stream = sys.stderr
    if enabled is False:
        return tqdm(total=total, desc=desc, unit=unit, disable=True)
    if stream.isatty():
        return tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True, **options)
    options.pop("position", None)  # bars in a log are lines, not rows of a screen
    options.pop("leave", None)  # the last line stays: it is the summary
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=_Lines(stream),
        disable=False,
        leave=True,
        mininterval=LINE_INTERVAL_S,
        bar_format=_OPEN_LINE_FORMAT if total is None else _LINE_FORMAT,
        **options,
    )
