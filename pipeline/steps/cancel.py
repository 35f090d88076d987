"""cancel: a request its caller cancelled ends as ``cancelled`` before any compute."""

from __future__ import annotations

from typing import ClassVar, Protocol

from pipeline.contract.messages import CancelRequest, TranslationRequest
from pipeline.contract.pairs import CANCEL_TOPIC
from pipeline.steps.base import Batch, Fields, wait_until_read


class CancelLookup(Protocol):
    """The cancels a worker knows (:class:`pipeline.control.cancels.CancelRegistry`)."""

    @property
    def ready(self) -> bool:
        """Whether the cancel topic has been read up to where it stood at start."""
        ...

    def cancel_for(self, request: TranslationRequest) -> CancelRequest | None: ...


class Cancel:
    """Resolves pending requests covered by a cancel as ``cancelled`` (no compute spent).

    Reads: ``request`` (id, bulk job id, ``submitted_at``). Resolves: ``cancelled``
    results with reason ``cancelled``. Waits (up to ``ready_wait_s``) until the
    worker has read the cancel topic up to where it stood at start: a cancel
    published before a restart must not be missed. Raises:
    :class:`TransientError` when it is still not read by then (the runner retries).
    """

    reads: ClassVar[Fields] = frozenset({"request"})
    sets: ClassVar[Fields] = frozenset({"result"})

    def __init__(self, cancels: CancelLookup, ready_wait_s: float) -> None:
        self._cancels = cancels
        self._ready_wait_s = ready_wait_s

    async def __call__(self, batch: Batch) -> None:
        await wait_until_read(self._cancels, self._ready_wait_s, CANCEL_TOPIC)
        for item in batch.pending():
            if item.request is None:
                continue
            cancel = self._cancels.cancel_for(item.request)
            if cancel is not None:
                by = f" by {cancel.requested_by}" if cancel.requested_by else ""
                batch.resolve(
                    item, "cancelled", reason="cancelled", error=f"cancelled{by} before translation"
                )
