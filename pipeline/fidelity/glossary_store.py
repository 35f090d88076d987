"""Glossaries per tenant and pair, stored in Redis (the L2 store), versioned.

Keys (``<prefix>`` is ``BABELSTREAM_REDIS__KEY_PREFIX``):

* ``<prefix>:glossary:<tenant>:<pair>:<name>`` — JSON ``{"version", "updated_at", "terms"}``;
* ``<prefix>:glossary-version:<tenant>:<pair>:<name>`` — the version counter,
  kept when a glossary is deleted so a re-created one never reuses a version;
* ``<prefix>:glossaries:<tenant>`` — a set of ``<pair>/<name>`` for listing.

Every change is also published on ``<prefix>:glossary-updates``. Workers hold
a copy (:class:`GlossaryCache`) and re-read it when it is older than
``BABELSTREAM_FIDELITY__GLOSSARY_REFRESH_S``, so a new version is in use
within seconds; the version is part of every cache key.
"""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import redis

from pipeline.errors import EXIT_USAGE, BabelStreamError
from pipeline.fidelity.glossary import Glossary, Term
from pipeline.settings import RedisSettings
from pipeline.storage.redis_client import redis_client


class GlossaryError(BabelStreamError):
    """A glossary file or name that cannot be used (an input mistake)."""

    exit_code = EXIT_USAGE


class GlossaryUnavailable(BabelStreamError):
    """Redis could not be read and no copy of the glossary is held (transient)."""


@dataclass(frozen=True, slots=True)
class StoredGlossary:
    """One stored glossary version."""

    tenant: str
    pair: str
    name: str
    version: int
    updated_at: int
    terms: tuple[Term, ...]

    def compiled(self) -> Glossary:
        """The terms, ready to match."""
        return Glossary(self.terms, name=self.name, version=self.version)


def read_terms(path: Path, max_terms: int) -> list[Term]:
    """Terms from a TSV or CSV file: ``source[,target]`` per row; no target: do not translate.

    Blank lines and lines starting with ``#`` are skipped, and so is a first
    row ``source,target``.
    """
    delimiter = "," if path.suffix.lower() == ".csv" else "\t"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GlossaryError(f"{path}: {exc}") from None
    terms: list[Term] = []
    rows = csv.reader(io.StringIO(text), delimiter=delimiter)
    for line_no, row in enumerate(rows, start=1):
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        if line_no == 1 and [c.strip().lower() for c in row[:2]] == ["source", "target"]:
            continue
        if len(row) > 2:
            raise GlossaryError(f"{path}:{line_no}: expected 1 or 2 columns, got {len(row)}")
        source = row[0].strip()
        target = row[1].strip() if len(row) > 1 and row[1].strip() else None
        if not source:
            raise GlossaryError(f"{path}:{line_no}: empty source term")
        terms.append(Term(source, target))
    if not terms:
        raise GlossaryError(f"{path}: no terms")
    if len(terms) > max_terms:
        raise GlossaryError(f"{path}: {len(terms)} terms, more than the limit of {max_terms}")
    return terms


def _part(value: str) -> str:
    """One component of a Redis key, percent-encoded (unchanged for plain names)."""
    return quote(value, safe="")


class GlossaryStore:
    """Reads and writes glossaries in Redis."""

    def __init__(self, settings: RedisSettings, client: redis.Redis | None = None) -> None:
        self._prefix = settings.key_prefix
        self._client = client or redis_client(settings)

    @property
    def channel(self) -> str:
        """The pub/sub channel every change is announced on."""
        return f"{self._prefix}:glossary-updates"

    def _key(self, kind: str, tenant: str, pair: str, name: str) -> str:
        for label, value in (("tenant", tenant), ("pair", pair), ("name", name)):
            if not value:
                raise GlossaryError(f"a glossary needs a {label}")
        # any label the contract allows (spaces, ':' and '/' too) makes one unambiguous key
        return f"{self._prefix}:{kind}:{_part(tenant)}:{_part(pair)}:{_part(name)}"

    def _index(self, tenant: str) -> str:
        """The set of ``<pair>/<name>`` of one tenant's glossaries."""
        return f"{self._prefix}:glossaries:{_part(tenant)}"

    def put(self, tenant: str, pair: str, name: str, terms: Iterable[Term]) -> StoredGlossary:
        """Store ``terms`` as the next version of the glossary; returns what was stored."""
        terms = tuple(Glossary(terms).terms)  # normalised and checked before anything is written
        version = int(self._client.incr(self._key("glossary-version", tenant, pair, name)))
        stored = StoredGlossary(tenant, pair, name, version, int(time.time() * 1000), terms)
        document = {
            "version": version,
            "updated_at": stored.updated_at,
            "terms": [[t.source, t.target] for t in terms],
        }
        with self._client.pipeline(transaction=True) as pipe:
            pipe.set(
                self._key("glossary", tenant, pair, name), json.dumps(document, ensure_ascii=False)
            )
            pipe.sadd(self._index(tenant), f"{pair}/{name}")
            pipe.publish(self.channel, json.dumps([tenant, pair, name, version]))
            pipe.execute()
        return stored

    def get(self, tenant: str, pair: str, name: str) -> StoredGlossary | None:
        """The current version, or None when there is no such glossary."""
        raw = self._client.get(self._key("glossary", tenant, pair, name))
        if raw is None:
            return None
        data = json.loads(raw)
        terms = tuple(Term(source, target) for source, target in data["terms"])
        return StoredGlossary(
            tenant, pair, name, int(data["version"]), int(data["updated_at"]), terms
        )

    def list(self, tenant: str) -> list[StoredGlossary]:
        """The tenant's glossaries (current versions), by pair and name."""
        members = sorted(
            m.decode() if isinstance(m, bytes) else m
            for m in self._client.smembers(self._index(tenant))
        )
        found = []
        for member in members:
            pair, _, name = member.partition("/")
            stored = self.get(tenant, pair, name)
            if stored is not None:
                found.append(stored)
        return found

    def delete(self, tenant: str, pair: str, name: str) -> bool:
        """Remove the glossary (its version counter stays); False when there was none."""
        with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(self._key("glossary", tenant, pair, name))
            pipe.srem(self._index(tenant), f"{pair}/{name}")
            pipe.publish(self.channel, json.dumps([tenant, pair, name, None]))
            removed, _, _ = pipe.execute()
        return bool(removed)

    def close(self) -> None:
        self._client.close()


@dataclass(slots=True)
class _Held:
    glossary: Glossary | None
    read_at: float


class GlossaryCache:
    """A worker's copies of the glossaries its requests name, re-read after ``refresh_s``.

    When Redis cannot be read, a copy already held keeps being used (and is
    re-read later); a glossary never read raises :class:`GlossaryUnavailable`,
    which the worker treats as a transient fault.
    """

    def __init__(
        self,
        load: Callable[[str, str, str], StoredGlossary | None],
        refresh_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._refresh_s = refresh_s
        self._clock = clock
        self._held: dict[tuple[str, str, str], _Held] = {}
        self._lock = threading.Lock()

    def get(self, tenant: str, pair: str, name: str) -> Glossary | None:
        """The glossary (None when it does not exist), at most ``refresh_s`` old."""
        key = (tenant, pair, name)
        now = self._clock()
        with self._lock:
            held = self._held.get(key)
        if held is not None and now - held.read_at < self._refresh_s:
            return held.glossary
        try:
            stored = self._load(tenant, pair, name)
        except redis.RedisError as exc:
            if held is not None:
                return held.glossary
            raise GlossaryUnavailable(f"cannot read glossary {name!r}: {exc}") from exc
        glossary = None
        if stored is not None:
            same = (
                held is not None
                and held.glossary is not None
                and held.glossary.version == stored.version
            )
            glossary = held.glossary if same and held is not None else stored.compiled()
        with self._lock:
            self._held[key] = _Held(glossary, now)
        return glossary
