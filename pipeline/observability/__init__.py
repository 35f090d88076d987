"""Prometheus metrics and OpenTelemetry tracing."""
