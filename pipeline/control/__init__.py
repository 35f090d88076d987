"""Operator controls: cancels, quarantine, quotas, fair share, priorities, dead letters."""
