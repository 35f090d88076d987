"""The live SLA dashboard (``babelstream dashboard``).

A small aiohttp app reads :class:`~pipeline.messages.SlaWindow` records from
``translate.sla`` and pushes them to browsers as server-sent events; the page
charts them per pair with Chart.js, which is vendored under ``static/vendor``
from npm (``make vendor``), so nothing is fetched from a CDN at run time.
"""

from pipeline.dashboard.server import SlaFeed, WindowStore, create_app, run

__all__ = ["SlaFeed", "WindowStore", "create_app", "run"]
