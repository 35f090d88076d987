"""Readers of the model sources people hold: what each one is and which pairs it serves.

- **Argos Translate packages** (``.argosmodel``: a zip of one folder holding
  ``metadata.json``, a CTranslate2 ``model/``, ``sentencepiece.model`` and
  usually ``stanza/``). The model is used as it is. Its ``stanza/`` sentence
  splitter is not: the pipeline cuts long texts at sentences itself
  (:mod:`pipeline.engine.segment`).
- **OPUS-MT releases** (a zip of a Marian ``.npz``, its ``*.vocab.yml``,
  ``source.spm`` / ``target.spm``, ``README.md`` naming the languages and
  ``LICENSE``). Converted by CTranslate2's Marian converter, without PyTorch.
  A release with several target languages takes a ``>>tgt<<`` token first in
  the source: it becomes one ``[[model]]`` table.

Every reader raises :class:`~pipeline.errors.ModelSourceError` for a source it
cannot read, naming the file and what is wrong in one line.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pipeline.contract.pairs import Pair, check_model_id
from pipeline.engine.registry import is_language_tag
from pipeline.errors import ContractError, ModelSourceError

SourceKind = Literal["argos", "opus-mt"]
# an OPUS-MT README's language lines: "* source language(s): en", "* target language(s): de fr"
_OPUS_LANGUAGES = re.compile(r"^\W*(source|target) language\(s\):\s*(.+)$", re.MULTILINE | re.I)
# "licen[cs]e: X" in a README or metadata-like text
_LICENCE_LINE = re.compile(r"^\W*licen[cs]e\W*:\s*(.+)$", re.MULTILINE | re.I)
# the first lines of licence texts that releases ship, by their SPDX ids
_LICENCE_TITLES = {
    "Attribution 4.0 International": "CC-BY-4.0",
    "Attribution-ShareAlike 4.0 International": "CC-BY-SA-4.0",
    "MIT License": "MIT",
    "Apache License": "Apache-2.0",
}
# a pair in a file or folder name: opus-mt-en-de, en-de, en_de
_NAMED_PAIR = re.compile(r"(?:^|[-_/])([a-z]{2,3})[-_]([a-z]{2,3})$")


@dataclass(frozen=True)
class ArgosPackage:
    """One unpacked Argos Translate package."""

    root: Path
    metadata: Mapping[str, Any]

    @property
    def pair(self) -> Pair:
        """The pair its metadata names (``from_code`` / ``to_code``)."""
        src, tgt = self.metadata.get("from_code"), self.metadata.get("to_code")
        if not (isinstance(src, str) and src and isinstance(tgt, str) and tgt):
            raise ModelSourceError(
                f"{self.root / 'metadata.json'}: names no pair (from_code and to_code)"
            )
        return _pair(src, tgt, self.root / "metadata.json")

    @property
    def model_id(self) -> str:
        return _model_id(f"argos-{self.pair.source}-{self.pair.target}")

    @property
    def target_prefix(self) -> tuple[str, ...]:
        prefix = self.metadata.get("target_prefix") or ""
        return (str(prefix),) if prefix else ()

    @property
    def is_translation(self) -> bool:
        """False for Argos's other package types (``sbd``: sentence boundaries only)."""
        return str(self.metadata.get("type", "translate")) == "translate"

    @property
    def source(self) -> str:
        name = self.metadata.get("code") or f"translate-{self.pair.source}_{self.pair.target}"
        version = self.metadata.get("package_version")
        return f"argos:{name}" + (f"@{version}" if version else "")

    @property
    def licence(self) -> str:
        declared = self.metadata.get("license") or self.metadata.get("licence")
        return str(declared) if declared else licence_of(self.root)

    def check_files(self) -> None:
        """Raise ModelSourceError when the package lacks its model or tokenizer."""
        if not (self.root / "model" / "model.bin").is_file():
            raise ModelSourceError(f"{self.root}: no model/model.bin (not a CTranslate2 package)")
        if not (self.root / "sentencepiece.model").is_file():
            raise ModelSourceError(
                f"{self.root}: no sentencepiece.model (packages with other tokenizers are "
                "not supported)"
            )


@dataclass(frozen=True)
class OpusRelease:
    """One unpacked OPUS-MT release and the languages it translates."""

    root: Path
    sources: tuple[str, ...]
    targets: tuple[str, ...]

    @property
    def multilingual(self) -> bool:
        return len(self.sources) * len(self.targets) > 1

    @property
    def model_id(self) -> str:
        return _model_id(f"opus-mt-{_codes(self.sources)}-{_codes(self.targets)}")

    @property
    def licence(self) -> str:
        return licence_of(self.root)

    def target_token(self, tag: str) -> str:
        """The ``>>id<<`` token that asks this release for target ``tag``."""
        return f">>{tag.replace('-', '_')}<<"


def argos_package(root: Path) -> ArgosPackage:
    """Read the package unpacked at ``root`` (the folder holding ``metadata.json``)."""
    path = root / "metadata.json"
    try:
        metadata = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelSourceError(f"{root}: no metadata.json (not an Argos package)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelSourceError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(metadata, dict):
        raise ModelSourceError(f"{path}: expected a JSON object")
    return ArgosPackage(root, metadata)


def argos_packages(folder: Path) -> list[ArgosPackage]:
    """The packages installed in ``folder`` (LibreTranslate's
    ``~/.local/share/argos-translate/packages``): each sub-folder with a ``metadata.json``."""
    found = [argos_package(d) for d in sorted(folder.iterdir()) if (d / "metadata.json").is_file()]
    if not found:
        raise ModelSourceError(f"{folder}: no Argos packages (no sub-folder has metadata.json)")
    return found


def opus_release(root: Path, pair: Pair | None, named: str) -> OpusRelease:
    """Read the release unpacked at ``root``; its languages from ``pair`` when given, else
    its README, else a pair in ``named`` (the archive's URL or file name)."""
    if pair is not None:
        return OpusRelease(root, (pair.source,), (pair.target,))
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else ""
    sides: dict[str, tuple[str, ...]] = {}
    for side, codes in _OPUS_LANGUAGES.findall(text):
        sides.setdefault(side.lower(), tuple(_tag(c) for c in codes.split() if c.strip()))
    if "source" in sides and "target" in sides:
        release = OpusRelease(root, sides["source"], sides["target"])
        for tag in (*release.sources, *release.targets):
            _check_tag(tag, readme)
        return release
    match = _NAMED_PAIR.search(Path(named).stem.lower()) or _NAMED_PAIR.search(
        str(PurePosixPath(named).parent).lower()
    )
    if match:
        return OpusRelease(root, (match.group(1),), (match.group(2),))
    raise ModelSourceError(
        f"{named}: the release does not say its languages (no README language lines, no "
        "pair in its name); name them with --pair SRC_TGT"
    )


def is_opus_release(root: Path) -> bool:
    return any(root.glob("*.npz")) and any(root.glob("*.vocab.yml"))


def unpack(archive: Path, into: Path) -> Path:
    """Unpack the zip ``archive`` into ``into``; return the folder holding its files (its
    single top folder when it has one)."""
    try:
        with zipfile.ZipFile(archive) as zipped:
            bad = zipped.testzip()
            if bad is not None:
                raise ModelSourceError(f"{archive}: corrupt archive (member {bad} is damaged)")
            for name in zipped.namelist():
                member = PurePosixPath(name)
                if member.is_absolute() or ".." in member.parts:
                    raise ModelSourceError(f"{archive}: member {name} points outside the archive")
            zipped.extractall(into)
    except zipfile.BadZipFile as exc:
        raise ModelSourceError(f"{archive}: not a zip archive or corrupt ({exc})") from None
    entries = [p for p in into.iterdir() if not p.name.startswith(("__MACOSX", "."))]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else into


def index_entries(index: Any, url: str) -> list[Mapping[str, Any]]:
    """The package entries of an Argos index (a JSON list of package metadata)."""
    if not isinstance(index, list) or not all(isinstance(e, dict) for e in index):
        raise ModelSourceError(f"{url}: not an Argos package index (a JSON list of packages)")
    return index


def choose(entries: Iterable[Mapping[str, Any]], pair: Pair, url: str) -> Mapping[str, Any]:
    """The newest translation package of ``pair`` in an index."""
    listed = [e for e in entries if str(e.get("type", "translate")) == "translate"]
    matches = [
        e for e in listed if (e.get("from_code"), e.get("to_code")) == (pair.source, pair.target)
    ]
    if not matches:
        known = sorted({f"{e.get('from_code')}_{e.get('to_code')}" for e in listed})
        shown = ", ".join(known[:12]) + (f" and {len(known) - 12} more" if len(known) > 12 else "")
        raise ModelSourceError(f"{url}: no package for {pair.id} (it lists {shown or 'none'})")
    if not any(isinstance(e.get("links"), list) and e["links"] for e in matches):
        raise ModelSourceError(f"{url}: the package for {pair.id} has no download links")
    return max(matches, key=lambda e: _version(str(e.get("package_version", "0"))))


def published_sha256(entry: Mapping[str, Any]) -> str | None:
    """The SHA-256 an index entry publishes for its archive, when it does."""
    for key in ("sha256", "checksum"):
        value = entry.get(key)
        if isinstance(value, str) and re.fullmatch(r"(sha256:)?[0-9a-fA-F]{64}", value):
            return value.removeprefix("sha256:")
    return None


def licence_of(root: Path) -> str:
    """The licence a source declares: a ``licence:`` line of its README, else the first
    line of its LICENSE file; empty when it declares none."""
    readme = root / "README.md"
    if readme.is_file():
        found = _LICENCE_LINE.search(readme.read_text(encoding="utf-8", errors="replace"))
        if found:
            return found.group(1).strip().strip("`*")[:80]
    for name in ("LICENSE", "LICENSE.txt", "LICENCE"):
        path = root / name
        if path.is_file():
            first = _first_line(path.read_text(encoding="utf-8", errors="replace").splitlines())
            if first:
                return _LICENCE_TITLES.get(first, first[:80])
    return ""


def _first_line(lines: Iterable[str]) -> str:
    return next((line.strip() for line in lines if line.strip()), "")


def _pair(src: str, tgt: str, where: Path) -> Pair:
    pair = Pair(_tag(src), _tag(tgt))
    for tag in (pair.source, pair.target):
        _check_tag(tag, where)
    return pair


def _check_tag(tag: str, where: Path) -> None:
    if not is_language_tag(tag):
        raise ModelSourceError(f"{where}: {tag!r} is not a language tag (BCP-47: en, zh-Hant)")


def _tag(code: str) -> str:
    """A language code as the registry writes it: ``zho_Hant`` -> ``zho-Hant``."""
    return code.strip().replace("_", "-")


def _codes(tags: tuple[str, ...]) -> str:
    return tags[0] if len(tags) == 1 else f"mul{len(tags)}"


def _model_id(name: str) -> str:
    model_id = re.sub(r"[^A-Za-z0-9._-]", "-", name)[:200]
    try:
        return check_model_id(model_id)
    except ContractError as exc:
        raise ModelSourceError(str(exc)) from None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text)) or (0,)


def iter_languages(release: OpusRelease) -> Iterator[str]:
    """Every language of a release, sources first, each once."""
    yield from dict.fromkeys((*release.sources, *release.targets))
