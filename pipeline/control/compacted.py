"""One record of a compacted control topic (cancels, quarantine), applied to what a worker
keeps of it: a value adds an entry, a tombstone (no value) forgets its key's."""

from __future__ import annotations

import logging
from collections.abc import Callable

from pydantic import ValidationError

log = logging.getLogger(__name__)


def apply_compacted(
    key: bytes | None,
    value: bytes | None,
    add: Callable[[bytes], None],
    forget: Callable[[str], None],
    what: str,
) -> bool:
    """``add(value)``, or ``forget(key)`` for a tombstone; False when the value was
    unreadable (skipped, logged with ``what`` the topic holds)."""
    if value is None:
        if key is not None:
            forget(key.decode("utf-8", errors="replace"))
        return True
    try:
        add(value)
    except ValidationError as exc:
        log.warning("skipping an unreadable %s record (key %r): %s", what, key, exc)
        return False
    return True
