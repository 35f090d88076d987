"""The worker's Faust app produces idempotently (a retried batch is not written twice)."""

from __future__ import annotations

import faust

from workers.faust_adapter import use_idempotent_producer


def test_the_apps_producer_asks_aiokafka_for_idempotence() -> None:
    app = faust.App("idempotence-check", broker="kafka://127.0.0.1:9", store="memory://")
    use_idempotent_producer(app)
    # the options Faust hands to AIOKafkaProducer on start (no broker needed to read them)
    options = {**app.producer._settings_default(), **app.producer._settings_extra()}
    assert options["enable_idempotence"] is True
    assert options["acks"] == "all"
