"""A LibreTranslate-compatible HTTP gateway onto the Kafka path (``babelstream gateway``).

Every call becomes requests on ``translate.requests`` (one per text of a
list), and waits for their results on a reply topic that the gateway
process owns, so callers that speak LibreTranslate's API get cross-request
batching, the dedup window and caches, tenant quotas and fair share, and
SLA figures. See docs/guides/gateway.md.

* :mod:`~pipeline.gateway.languages` — registry languages and LibreTranslate's codes;
* :mod:`~pipeline.gateway.keys` — API keys, each mapped to a tenant (Redis);
* :mod:`~pipeline.gateway.link` — the process's Kafka producer and reply consumer;
* :mod:`~pipeline.gateway.call_store` — results nobody waits for any more, by request id (Redis);
* :mod:`~pipeline.gateway.calls` — one ``/translate`` call: parsing, checks, reassembly;
* :mod:`~pipeline.gateway.app` — the FastAPI application and its OpenAPI spec;
* :mod:`~pipeline.gateway.files` — ``/translate_file`` as a bulk job;
* :mod:`~pipeline.gateway.server` — uvicorn, one or more processes.
"""
