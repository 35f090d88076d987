"""Fault drills: paced traffic, a fault, then every acknowledged request id accounted for.

The same pieces serve the integration and chaos tests and ``babelstream drill``:
:class:`~pipeline.drill.traffic.PacedTraffic` sends uniquely identified
requests at a steady rate and remembers which ones the broker acknowledged;
:class:`~pipeline.drill.reconcile.ResultTally` reads every result for them;
:func:`~pipeline.drill.reconcile.reconcile` turns both into a report.
"""
