"""Text fidelity: markup, placeholders and terms survive translation.

A request is *prepared* into engine segments (plain sentences in which every
protected span is replaced by a placeholder token) plus a plan to put it back
together; engine outputs are then *restored* into the final text with a
fidelity verdict. The submodules are pure (no Kafka, no Redis, no engine):

* :mod:`~pipeline.fidelity.tokens` — the placeholder token format;
* :mod:`~pipeline.fidelity.placeholders` — protected spans in plain text;
* :mod:`~pipeline.fidelity.icu` — ICU MessageFormat (plural/select);
* :mod:`~pipeline.fidelity.markup` — HTML/XML and Markdown documents;
* :mod:`~pipeline.fidelity.glossary` — per-tenant terms and do-not-translate;
* :mod:`~pipeline.fidelity.quality` — output checks before publishing;
* :mod:`~pipeline.fidelity.pipeline` — ``prepare``/``restore``.

Nothing here is imported at package import time: the demo model's training
environment imports :mod:`~pipeline.fidelity.tokens` without pydantic.
"""
