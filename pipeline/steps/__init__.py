"""The worker's hot path as small steps over a micro-batch.

``chains.py`` composes them (decode → deadline → dedup → window → cache →
engine → store → resolve → emit → publish); ``base.py`` holds the batch, its
items and the two failure classes; ``batch_runner.py`` runs a batch through the
steps and retries transient faults.
"""
