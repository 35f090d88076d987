"""Text fidelity: markup, placeholders and terms survive translation.

A request is *prepared* into engine segments (plain sentences in which every
protected span is replaced by a placeholder token) plus a plan to put it back
together; engine outputs are then *restored* into the final text with a
fidelity verdict. The submodules are pure (no Kafka, no Redis, no engine):

* :mod:`~pipeline.fidelity.tokens` — the placeholder token format;
* :mod:`~pipeline.fidelity.document` — literals, runs (segments) and spans;
* :mod:`~pipeline.fidelity.placeholders` — protected spans in plain text;
* :mod:`~pipeline.fidelity.icu` — ICU MessageFormat (plural/select);
* :mod:`~pipeline.fidelity.markup` / :mod:`~pipeline.fidelity.markdown` — documents;
* :mod:`~pipeline.fidelity.glossary` — terms and do-not-translate matching;
* :mod:`~pipeline.fidelity.quality` — output checks before publishing;
* :mod:`~pipeline.fidelity.align` — placeholders put back by attention;
* :mod:`~pipeline.fidelity.prepare` / :mod:`~pipeline.fidelity.restore` — the two halves;

Around them: :mod:`~pipeline.fidelity.glossary_store` (glossaries in Redis, a worker's
copy), :mod:`~pipeline.fidelity.drive` (running restorations against a
translator) and :mod:`~pipeline.fidelity.service` (what a worker calls).

Nothing here is imported at package import time: the demo model's training
environment imports :mod:`~pipeline.fidelity.tokens` without pydantic.
"""
