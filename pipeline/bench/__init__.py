"""Benchmarks behind ``babelstream bench``: workloads, runs, one typed report.

``model`` builds the OPUS-MT-shaped benchmark model; ``target`` resolves a
pair and starts a worker for it (refusing when another already serves it);
``engine``, ``e2e``, ``naive`` and ``interference`` measure; ``report`` is
what every bench prints; ``plot`` draws the latency-load curve.
"""
