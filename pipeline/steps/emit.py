"""emit: the records this batch produces, each carrying its request's trace."""

from __future__ import annotations

from pipeline.messages import Headers
from pipeline.pairs import DLQ_TOPIC
from pipeline.routing import result_topic
from pipeline.steps.base import Batch, Item, Outgoing
from pipeline.tracing import inject_headers


class Emit:
    """Turns every resolved item into the record to produce.

    Reads: ``result`` (to the request's reply topic, keyed by request id) or
    ``dead_letter`` (to the DLQ, with the original key). Sets: ``batch.outgoing``.
    Raises: nothing.
    """

    async def __call__(self, batch: Batch) -> None:
        for item in batch.items:
            if item.result is not None and item.request is not None:
                batch.outgoing.append(Outgoing(
                    result_topic(item.request), item.result.request_id.encode(),
                    item.result.to_json(), _headers(item), kind="result",
                ))
            elif item.dead_letter is not None:
                batch.outgoing.append(Outgoing(
                    DLQ_TOPIC, item.record.key, item.dead_letter.to_json(), _headers(item),
                    kind="dead_letter",
                ))


def _headers(item: Item) -> Headers:
    # The result continues the request's trace through its translate span.
    return inject_headers(item.record.headers, item.span)
