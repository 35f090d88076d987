"""Kafka plumbing: clients, reachability, consumer groups, reply topics, the offset book."""
