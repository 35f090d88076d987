"""decode: raw record → validated request and its digest, or a dead letter."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from pipeline.contract.codec import Accepted, RecordRef, dead_letter, decode_request
from pipeline.contract.digest import request_digest
from pipeline.contract.pairs import Pair
from pipeline.settings import LimitSettings
from pipeline.steps.base import Batch, Fields


class Decode:
    """Reads each pending item's bytes; resolves undecodable or invalid ones as dead letters.

    Reads: ``record``. Sets: ``request`` and ``digest`` (model, pair, tenant,
    domain, full text). Resolves: dead letters (input-caused), including a
    request for a pair the topic's model does not serve (someone bypassed the
    router). Raises: nothing.
    """

    reads: ClassVar[Fields] = frozenset({"record"})
    sets: ClassVar[Fields] = frozenset({"request", "digest", "dead_letter"})

    def __init__(self, limits: LimitSettings, serves: Callable[[Pair], bool]) -> None:
        """``serves``: whether this agent's model translates a pair."""
        self._limits = limits
        self._serves = serves

    async def __call__(self, batch: Batch) -> None:
        for item in batch.pending():
            record = item.record
            ref = RecordRef(record.topic, record.partition, record.offset)
            decoded = decode_request(record.key, record.value, ref, self._limits)
            if not isinstance(decoded, Accepted):
                item.dead_letter = decoded.dead_letter
                continue
            request = decoded.request
            if not self._serves(request.pair):
                item.dead_letter = dead_letter(
                    ref,
                    record.key,
                    record.value,
                    "invalid",
                    f"a {request.pair.id} request on {record.topic}, whose model does not "
                    "serve that pair",
                )
                continue
            item.request = request
            item.digest = request_digest(request, batch.model_id)
