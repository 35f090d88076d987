"""Bulk document jobs: a corpus in, a translated Parquet file out.

Documents are read (:mod:`~pipeline.bulk.readers`), cut into sentences that
reassemble byte-for-byte (:mod:`~pipeline.bulk.segmenter`), published as
requests with ids derived from (job, document, segment)
(:mod:`~pipeline.bulk.requests`) to ``translate.work-bulk.<model>``; results are
appended to a resumable job state (:mod:`~pipeline.bulk.state`) as they
arrive (:mod:`~pipeline.bulk.runner`) and put back together in input order
(:mod:`~pipeline.bulk.assemble`). ``jobs/bulk_spark.py`` does the same for
corpora larger than one machine, with the same segmenter and output layout.
"""

from __future__ import annotations

from pipeline.errors import EXIT_USAGE, BabelStreamError


class BulkError(BabelStreamError):
    """A bulk job cannot go on: bad input, inconsistent state, or no results coming."""


class BulkInputError(BulkError):
    """The job's input, id or pair is unusable as given (a usage mistake: exit 2)."""

    exit_code = EXIT_USAGE


class BulkInterrupted(BulkError):
    """The job was asked to stop; its state is kept and a rerun resumes it."""


class BulkCancelled(BulkInterrupted):
    """``bulk cancel`` stopped the job; its state is kept and a rerun resumes it."""
