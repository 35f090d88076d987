"""The model registry: which model directory serves which language pair.

``models/registry.toml`` holds one ``[[pair]]`` table per pair id::

    [[pair]]
    id = "en_en-XA"                 # <src>_<tgt>
    model = "demo"                  # CTranslate2 model dir, relative to this file
    tokenizer = "spm.model"         # SentencePiece model, relative to the model dir
    # source_tokenizer / target_tokenizer instead, when the two sides differ
    target_prefix = [">>en-XA<<"]   # tokens forced at the start of the output
    source_prefix = []              # tokens put before the source (NLLB: ["eng_Latn"])
    source_suffix = ["</s>"]        # tokens put after the source (Marian, NLLB, M2M-100)
    suppress_tokens = [">>en<<"]    # tokens never to generate (e.g. language tokens)
    compute_type = "auto"           # auto | int8 | int8_float16 | float16 | float32 | ...
    max_input_tokens = 512          # longer texts are split (see engine.translator)
    max_output_tokens = 1024        # decoding cap: the model's position limit
    decoding = "free"               # free | input_length (benchmark models, see translator)
    model_id = "demo"               # optional; defaults to the model dir's name

Parsing checks the file's shape only; :meth:`Registry.entries` checks the
files of the pairs a worker asks for, so a worker never fails because of a
model it does not serve. Pairs that name the same model directory (and compute
type) share one loaded CTranslate2 model.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError, ContractError
from pipeline.pairs import Pair

COMPUTE_TYPES: frozenset[str] = frozenset(
    {
        "auto",
        "default",
        "int8",
        "int8_float32",
        "int8_float16",
        "int8_bfloat16",
        "int16",
        "float16",
        "bfloat16",
        "float32",
    }
)

_KEYS = frozenset(
    {
        "id",
        "model",
        "model_id",
        "tokenizer",
        "source_tokenizer",
        "target_tokenizer",
        "target_prefix",
        "source_prefix",
        "source_suffix",
        "suppress_tokens",
        "compute_type",
        "max_input_tokens",
        "max_output_tokens",
        "description",
        "decoding",
    }
)

# How long the output may be: ``free`` stops at the model's </s> (up to twice
# the input plus some slack); ``input_length`` decodes exactly as many tokens
# as each sequence's own input (random-weight benchmark models never choose
# </s> by themselves).
DECODINGS: tuple[str, ...] = ("free", "input_length")


def check_compute_type(value: str, where: str) -> str:
    """Return ``value`` if CTranslate2 knows this compute type, else raise ConfigError."""
    if value not in COMPUTE_TYPES:
        raise ConfigError(
            f"{where}: unknown compute_type {value!r}; "
            f"choose one of {', '.join(sorted(COMPUTE_TYPES))}"
        )
    return value


@dataclass(frozen=True, slots=True)
class PairEntry:
    """One registry entry: how to translate one pair. Paths are absolute."""

    pair: Pair
    model_dir: Path
    source_tokenizer: Path
    target_tokenizer: Path
    model_id: str
    target_prefix: tuple[str, ...] = ()
    source_prefix: tuple[str, ...] = ()
    source_suffix: tuple[str, ...] = ()
    suppress_tokens: tuple[str, ...] = ()
    compute_type: str = "auto"
    max_input_tokens: int = 1024
    max_output_tokens: int = 1024
    description: str = ""
    decoding: str = "free"

    def problems(self) -> list[str]:
        """What is missing on disk for this entry (empty when it can be loaded)."""
        found: list[str] = []
        if not self.model_dir.is_dir():
            found.append(f"model directory {self.model_dir} does not exist")
        elif not (self.model_dir / "model.bin").is_file():
            found.append(
                f"model directory {self.model_dir} has no model.bin (not a CTranslate2 model)"
            )
        for side, path in (("source", self.source_tokenizer), ("target", self.target_tokenizer)):
            if not path.is_file():
                found.append(f"{side} tokenizer {path} does not exist")
        return found

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly view, for ``babelstream models list --json``."""
        data = asdict(self)
        data["pair"] = self.pair.id
        for key in ("model_dir", "source_tokenizer", "target_tokenizer"):
            data[key] = str(data[key])
        for key in ("target_prefix", "source_prefix", "source_suffix", "suppress_tokens"):
            data[key] = list(data[key])
        return data


@dataclass(frozen=True)
class Registry:
    """All entries of one registry file, by pair id."""

    path: Path
    pairs: Mapping[str, PairEntry] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Registry:
        """Read and check the shape of a registry file (model files are checked later)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"model registry {path} does not exist") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"model registry {path} is not valid TOML: {exc}") from None
        return cls.from_dict(data, base=path.parent, path=path)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base: Path, path: Path) -> Registry:
        """Build from parsed TOML; relative model paths resolve against ``base``."""
        extra = set(data) - {"pair"}
        if extra:
            raise ConfigError(
                f"{path}: unknown top-level key(s) {sorted(extra)}; expected [[pair]]"
            )
        raw = data.get("pair", [])
        if not isinstance(raw, list):
            raise ConfigError(f"{path}: 'pair' must be an array of tables ([[pair]])")
        entries: dict[str, PairEntry] = {}
        for n, item in enumerate(raw, 1):
            entry = _entry(item, base, f"{path} [[pair]] #{n}")
            if entry.pair.id in entries:
                raise ConfigError(
                    f"{path}: pair {entry.pair.id} is served twice "
                    f"({entries[entry.pair.id].model_dir} and {entry.model_dir}); keep one entry"
                )
            entries[entry.pair.id] = entry
        return cls(path=path, pairs=entries)

    def entries(self, pairs: Iterable[Pair | str] | None = None) -> list[PairEntry]:
        """Entries for ``pairs`` (all when None), after checking their files exist."""
        wanted = list(self.pairs) if pairs is None else [str(p) for p in pairs]
        chosen: list[PairEntry] = []
        for pair_id in dict.fromkeys(wanted):
            entry = self.pairs.get(pair_id)
            if entry is None:
                served = ", ".join(sorted(self.pairs)) or "none"
                raise ConfigError(f"pair {pair_id} is not in {self.path} (served: {served})")
            problems = entry.problems()
            if problems:
                raise ConfigError(f"{self.path}: pair {pair_id}: " + "; ".join(problems))
            chosen.append(entry)
        return chosen

    def add(self, entry: PairEntry) -> None:
        """Append ``entry`` to the registry file (creating it), refusing a duplicate pair."""
        if entry.pair.id in self.pairs:
            raise ConfigError(
                f"{self.path}: pair {entry.pair.id} is already served by "
                f"{self.pairs[entry.pair.id].model_dir}; remove that entry first"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write("\n" + _entry_toml(entry, self.path.parent.resolve()))

    def save(self, header: str = "") -> None:
        """(Re)write the whole file: ``header`` (comment lines), then every entry."""
        base = self.path.parent.resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = "\n".join(_entry_toml(entry, base) for entry in self.pairs.values())
        self.path.write_text(header + "\n" + body, encoding="utf-8")


def _entry_toml(entry: PairEntry, base: Path) -> str:
    """One ``[[pair]]`` table; the model path relative to ``base`` when it is below it."""
    lines = ["[[pair]]", f"id = {_toml_str(entry.pair.id)}"]
    lines.append(f"model = {_toml_str(_rel(entry.model_dir, base))}")
    lines.append(f"model_id = {_toml_str(entry.model_id)}")
    if entry.source_tokenizer == entry.target_tokenizer:
        lines.append(f"tokenizer = {_toml_str(_rel(entry.source_tokenizer, entry.model_dir))}")
    else:
        lines.append(
            f"source_tokenizer = {_toml_str(_rel(entry.source_tokenizer, entry.model_dir))}"
        )
        lines.append(
            f"target_tokenizer = {_toml_str(_rel(entry.target_tokenizer, entry.model_dir))}"
        )
    for key in ("target_prefix", "source_prefix", "source_suffix", "suppress_tokens"):
        lines.append(f"{key} = [{', '.join(_toml_str(t) for t in getattr(entry, key))}]")
    lines.append(f"compute_type = {_toml_str(entry.compute_type)}")
    lines.append(f"max_input_tokens = {entry.max_input_tokens}")
    lines.append(f"max_output_tokens = {entry.max_output_tokens}")
    if entry.decoding != "free":
        lines.append(f"decoding = {_toml_str(entry.decoding)}")
    if entry.description:
        lines.append(f"description = {_toml_str(entry.description)}")
    return "\n".join(lines) + "\n"


def _entry(item: Any, base: Path, where: str) -> PairEntry:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = set(item) - _KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
    for key in ("id", "model"):
        if not isinstance(item.get(key), str) or not item[key]:
            raise ConfigError(f"{where}: '{key}' is required and must be a string")
    try:
        pair = Pair.parse(item["id"])
    except ContractError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    where = f"{where} ({pair.id})"
    model_dir = (base / item["model"]).resolve()
    shared = item.get("tokenizer")
    src_tok = item.get("source_tokenizer", shared)
    tgt_tok = item.get("target_tokenizer", shared)
    if not isinstance(src_tok, str) or not isinstance(tgt_tok, str):
        raise ConfigError(
            f"{where}: set 'tokenizer' (or both 'source_tokenizer' and 'target_tokenizer') "
            "to the SentencePiece model file"
        )
    compute_type = check_compute_type(str(item.get("compute_type", "auto")), where)
    limits = {}
    for key in ("max_input_tokens", "max_output_tokens"):
        limits[key] = item.get(key, 1024)
        if not isinstance(limits[key], int) or limits[key] < 2:
            raise ConfigError(f"{where}: {key} must be an integer >= 2")
    decoding = item.get("decoding", "free")
    if decoding not in DECODINGS:
        raise ConfigError(f"{where}: decoding must be one of {', '.join(DECODINGS)}")
    return PairEntry(
        pair=pair,
        model_dir=model_dir,
        source_tokenizer=model_dir / src_tok,
        target_tokenizer=model_dir / tgt_tok,
        model_id=str(item.get("model_id", model_dir.name)),
        target_prefix=_tokens(item, "target_prefix", where),
        source_prefix=_tokens(item, "source_prefix", where),
        source_suffix=_tokens(item, "source_suffix", where),
        suppress_tokens=_tokens(item, "suppress_tokens", where),
        compute_type=compute_type,
        max_input_tokens=limits["max_input_tokens"],
        max_output_tokens=limits["max_output_tokens"],
        description=str(item.get("description", "")),
        decoding=decoding,
    )


def _tokens(item: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = item.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
        raise ConfigError(f"{where}: '{key}' must be a token or a list of tokens")
    return tuple(value)


def _rel(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path.resolve())


def _toml_str(value: str) -> str:
    # A JSON string is a valid TOML basic string.
    return json.dumps(value, ensure_ascii=False)
