"""The live SLA dashboard (``babelstream dashboard``).

A small aiohttp app reads :class:`~pipeline.contract.messages.SlaWindow` records from
``translate.sla`` (and late rows from ``translate.sla.late``), renders the
windows it has into the page, and pushes new ones to browsers as server-sent
events; the page charts them per pair and priority class with Chart.js, which
is vendored under ``static/vendor`` from npm (``make vendor``), so nothing is
fetched from a CDN at run time.
"""

from pipeline.sla.dashboard.server import SlaFeed, WindowStore, create_app, render_index, run

__all__ = ["SlaFeed", "WindowStore", "create_app", "render_index", "run"]
