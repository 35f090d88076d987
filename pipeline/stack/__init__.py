"""The local dev stack: a single-node Kafka (KRaft) and a Redis, started from ``var/``.

``manager`` holds the ``up`` / ``down`` / ``status`` API the CLI and the
integration-test fixtures share; ``jars`` fetches JVM artifacts with Maven.
"""
