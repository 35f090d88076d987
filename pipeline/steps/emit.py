"""emit: the records this batch produces, each carrying its request's trace."""

from __future__ import annotations

from typing import ClassVar

from pipeline.contract.messages import Headers
from pipeline.contract.pairs import DLQ_TOPIC
from pipeline.kafka.records import Outgoing
from pipeline.observability.tracing import inject_headers
from pipeline.steps.base import Batch, Fields, Item


class Emit:
    """Turns every resolved item into the record to produce.

    Reads: ``result`` (to the shared results topic, keyed by request id, with the
    request's ``reply_to`` for its copy) and ``dead_letter`` (to the DLQ, with the
    original key; a request set apart by the runner has both). Sets:
    ``batch.outgoing``. Raises: nothing.
    """

    reads: ClassVar[Fields] = frozenset({"result"})
    sets: ClassVar[Fields] = frozenset({"outgoing"})

    async def __call__(self, batch: Batch) -> None:
        for item in batch.items:
            if item.result is not None and item.request is not None:
                batch.outgoing.append(
                    Outgoing.for_result(
                        item.result,
                        _headers(item),
                        reply_to=item.request.reply_to,
                    )
                )
            if item.dead_letter is not None:
                batch.outgoing.append(
                    Outgoing(
                        DLQ_TOPIC,
                        item.record.key,
                        item.dead_letter.to_json(),
                        _headers(item),
                        kind="dead_letter",
                    )
                )


def _headers(item: Item) -> Headers:
    # The result continues the request's trace through its translate span.
    return inject_headers(item.record.headers, item.span)
