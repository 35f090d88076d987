"""Language pair ids and topic names.

A pair id is ``<src>_<tgt>`` (``en_de``, ``en_en-XA``). BCP-47 tags never
contain ``_``, so the id splits unambiguously, and ``_``/``-``/letters are
legal in Kafka topic names.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.errors import ContractError

REQUESTS_TOPIC = "translate.requests"
RESULTS_TOPIC = "translate.results"
DLQ_TOPIC = "translate.dlq"
SLA_TOPIC = "translate.sla"
# compacted, keyed by request id (``job:<job id>`` for a whole bulk job)
CANCEL_TOPIC = "translate.cancel"
# compacted, keyed by <topic>:<partition>:<offset>: consumed records no worker may run again
QUARANTINE_TOPIC = "translate.quarantine"
# compacted, keyed by dead-letter id: which dead letters were replayed
DLQ_REPLAYED_TOPIC = "translate.dlq.replayed"
SLA_LATE_TOPIC = "translate.sla.late"
TICKS_TOPIC = "translate.ticks"
PAIR_REQUESTS_PREFIX = "translate.requests."
PAIR_BULK_PREFIX = "translate.bulk."


@dataclass(frozen=True, slots=True)
class Pair:
    """An ordered language pair."""

    source: str
    target: str

    @property
    def id(self) -> str:
        return f"{self.source}_{self.target}"

    @classmethod
    def parse(cls, pair_id: str) -> Pair:
        src, sep, tgt = pair_id.partition("_")
        if not sep or not src or not tgt or "_" in tgt:
            raise ContractError(
                f"invalid pair id {pair_id!r}: expected '<src>_<tgt>', e.g. 'en_de'"
            )
        return cls(src, tgt)

    def __str__(self) -> str:
        return self.id


def pair_topic(pair: Pair | str) -> str:
    """Interactive per-pair work topic."""
    return PAIR_REQUESTS_PREFIX + str(pair)


def bulk_topic(pair: Pair | str) -> str:
    """Bulk per-pair work topic (served after interactive work)."""
    return PAIR_BULK_PREFIX + str(pair)
