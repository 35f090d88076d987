"""The documentation site's generated reference pages (``make docs``).

Everything here reads the code (click commands, the settings model, the JSON
Schemas, the metric declarations, the Prometheus rules) at build time, so the
reference cannot drift from it. :mod:`docsgen.hooks` hands the pages to MkDocs.
"""
