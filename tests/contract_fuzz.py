"""Schema-valid messages generated from the project's own JSON Schema (hypothesis-jsonschema).

Shared by the contract fuzz against the real stack
(``tests/integration/test_contract_fuzz.py``) and the unit test that the
edge (client and CLI validation) accepts what the schema accepts.
Generation is deterministic for a seed (``BABELSTREAM_FUZZ_SEED``), printed
with every run so a failure can be replayed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
DEFAULT_SEED = 20261203
T = TypeVar("T")


def fuzz_seed() -> int:
    """The seed of this run: ``BABELSTREAM_FUZZ_SEED``, else a fixed one (CI is repeatable)."""
    return int(os.environ.get("BABELSTREAM_FUZZ_SEED", DEFAULT_SEED))


def schema(name: str) -> dict[str, Any]:
    """A committed JSON Schema, by message name (``translation_request``, ...)."""
    (path,) = SCHEMAS.glob(f"{name}.v*.schema.json")
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def examples(strategy: st.SearchStrategy[T], count: int, at: int) -> list[T]:
    """``count`` distinct examples of ``strategy``, the same ones for the same seed ``at``."""
    drawn: list[T] = []

    @seed(at)
    @settings(
        max_examples=count,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def capture(value: T) -> None:
        drawn.append(value)

    capture()
    return drawn


def documents(name: str, count: int, at: int) -> list[dict[str, Any]]:
    """``count`` documents valid against the schema of ``name``."""
    return examples(from_schema(schema(name)), count, at)


def restamp(document: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The document with some fields replaced (ids, pairs, times the test needs)."""
    return {**document, **fields}


def describe_failure(
    at: int, failing: list[dict[str, Any]], why: Callable[[dict[str, Any]], str]
) -> str:
    """The seed and the failing documents, for the assertion message."""
    lines = [f"contract fuzz failed with seed {at} (BABELSTREAM_FUZZ_SEED={at} replays it):"]
    lines += [f"  {why(doc)}: {json.dumps(doc, ensure_ascii=False)[:600]}" for doc in failing[:10]]
    return "\n".join(lines)
