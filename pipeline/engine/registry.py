"""The model registry: which model serves which language pairs.

``models/registry.toml`` names each model once, in one of two forms. Pairs
that one model serves share its work topics and its micro-batches
(``translate.work.<model_id>``): the engine takes a target prefix per example,
so texts of every pair of a model meet in one call.

A ``[[pair]]`` table per pair (bilingual models, or a few pairs of one model)::

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
    source = "argos:translate-en_de-1_9"  # optional: where it came from (`models add`)
    licence = "CC-BY-4.0"           # optional: the licence its source declares
    model_id = "demo"               # optional; defaults to the model dir's name

Tables that name the same ``model_id`` (the default: the same directory) are
one model: they must agree on its directory, compute type and decoding.

A ``[[model]]`` table for a multilingual model (NLLB-200, M2M-100, OPUS-MT
``mul`` models), whose pairs come from its language list::

    [[model]]
    model_id = "nllb-200"
    model = "nllb-200"
    tokenizer = "spm.model"
    languages = ["en", "de", "fr"]          # BCP-47 tags; every ordered pair of two
    sources = ["en"]                        # optional: only these as source languages
    targets = []                            # optional: only these as targets
    language_token = "{lang}"               # a tag's token: ">>{lang}<<", "__{lang}__", ...
    language_tokens = { en = "eng_Latn", de = "deu_Latn", fr = "fra_Latn" }  # or one by one
    source_prefix = ["{src}"]               # {src} / {tgt}: the pair's language tokens
    target_prefix = ["{tgt}"]
    source_suffix = ["</s>"]
    suppress_language_tokens = true         # never generate a language token

Parsing checks the file's shape only; :meth:`Registry.models_for` checks the
files of the models a worker asks for, so a worker never fails because of a
model it does not serve.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from pipeline.contract.pairs import Pair, check_model_id
from pipeline.errors import ConfigError, ContractError

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
        "source",
        "licence",
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
    # where the model came from (`babelstream models add`) and its licence, when declared
    source: str = ""
    licence: str = ""

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


_MODEL_KEYS = frozenset(
    {
        "model",
        "model_id",
        "tokenizer",
        "source_tokenizer",
        "target_tokenizer",
        "languages",
        "sources",
        "targets",
        "language_token",
        "language_tokens",
        "target_prefix",
        "source_prefix",
        "source_suffix",
        "suppress_tokens",
        "suppress_language_tokens",
        "compute_type",
        "max_input_tokens",
        "max_output_tokens",
        "description",
        "decoding",
        "source",
        "licence",
    }
)
_BCP47 = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")


def is_language_tag(tag: str) -> bool:
    """Whether ``tag`` has the shape of a BCP-47 tag (``en``, ``zh-Hant``, ``en-XA``)."""
    return bool(_BCP47.match(tag))


@dataclass(frozen=True)
class Languages:
    """How a multilingual model's pairs and their language tokens come from its languages."""

    languages: tuple[str, ...]
    sources: frozenset[str]
    targets: frozenset[str]
    tokens: Mapping[str, str]
    target_prefix: tuple[str, ...]
    source_prefix: tuple[str, ...]
    source_suffix: tuple[str, ...]
    suppress_tokens: tuple[str, ...]

    def serves(self, pair: Pair) -> bool:
        return (
            pair.source != pair.target
            and pair.source in self.sources
            and (pair.target in self.targets)
        )

    def pairs(self) -> Iterator[Pair]:
        for src in self.languages:
            if src in self.sources:
                for tgt in self.languages:
                    if tgt in self.targets and tgt != src:
                        yield Pair(src, tgt)

    def count(self) -> int:
        both = len(self.sources & self.targets)
        return len(self.sources) * len(self.targets) - both

    def fill(self, templates: tuple[str, ...], pair: Pair) -> tuple[str, ...]:
        """Templates with ``{src}`` / ``{tgt}`` replaced by the pair's language tokens."""
        src, tgt = self.tokens[pair.source], self.tokens[pair.target]
        return tuple(t.replace("{src}", src).replace("{tgt}", tgt) for t in templates)


@dataclass(frozen=True)
class ModelEntry:
    """One model of the registry and the pairs it serves (explicit, or from languages).

    ``model_id`` names its work topics and is part of every cache digest.
    """

    model_id: str
    model_dir: Path
    compute_type: str = "auto"
    decoding: str = "free"
    description: str = ""
    # [[pair]] tables of this model, by pair id
    explicit: Mapping[str, PairEntry] = field(default_factory=dict)
    # a [[model]] table: its pairs come from its languages
    languages: Languages | None = None
    template: PairEntry | None = None

    def entry(self, pair: Pair) -> PairEntry | None:
        """How to translate ``pair`` with this model, or None when it does not serve it."""
        found = self.explicit.get(pair.id)
        if found is not None or self.languages is None or self.template is None:
            return found
        if not self.languages.serves(pair):
            return None
        spec = self.languages
        return replace(
            self.template,
            pair=pair,
            target_prefix=spec.fill(spec.target_prefix, pair),
            source_prefix=spec.fill(spec.source_prefix, pair),
            source_suffix=spec.fill(spec.source_suffix, pair),
        )

    def serves(self, pair: Pair) -> bool:
        return pair.id in self.explicit or (
            self.languages is not None and self.languages.serves(pair)
        )

    def pairs(self) -> Iterator[Pair]:
        """Every pair this model serves (a multilingual model's may be many thousands)."""
        for entry in self.explicit.values():
            yield entry.pair
        if self.languages is not None:
            yield from self.languages.pairs()

    def pair_count(self) -> int:
        return len(self.explicit) + (self.languages.count() if self.languages else 0)

    def any_entry(self) -> PairEntry:
        """One of its pairs' entries (files, limits and call settings are the model's)."""
        first = next(self.pairs())
        entry = self.entry(first)
        assert entry is not None
        return entry

    def problems(self) -> list[str]:
        """What is missing on disk for this model (empty when it can be loaded)."""
        tokenizers = {
            (e.source_tokenizer, e.target_tokenizer)
            for e in [*self.explicit.values(), *([self.template] if self.template else [])]
        }
        found = self.any_entry().problems()
        for src, tgt in sorted(tokenizers)[1:]:
            for side, path in (("source", src), ("target", tgt)):
                if not path.is_file():
                    found.append(f"{side} tokenizer {path} does not exist")
        return found


class Registry:
    """All models of one registry file, and the pairs they serve."""

    def __init__(self, path: Path, models: Mapping[str, ModelEntry] | None = None) -> None:
        self.path = Path(path)
        self.models: dict[str, ModelEntry] = dict(models or {})
        self._by_pair = {pid: m for m in self.models.values() for pid in m.explicit}
        self._multilingual = [m for m in self.models.values() if m.languages is not None]

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
        extra = set(data) - {"pair", "model"}
        if extra:
            raise ConfigError(
                f"{path}: unknown top-level key(s) {sorted(extra)}; expected [[pair]] or [[model]]"
            )
        models: dict[str, ModelEntry] = {}
        for key in ("pair", "model"):
            if not isinstance(data.get(key, []), list):
                raise ConfigError(f"{path}: '{key}' must be an array of tables ([[{key}]])")
        for n, item in enumerate(data.get("model", []), 1):
            model = _model(item, base, f"{path} [[model]] #{n}")
            if model.model_id in models:
                raise ConfigError(f"{path}: model {model.model_id} is declared twice")
            models[model.model_id] = model
        pairs: dict[str, PairEntry] = {}
        for n, item in enumerate(data.get("pair", []), 1):
            entry = _entry(item, base, f"{path} [[pair]] #{n}")
            if entry.pair.id in pairs:
                raise ConfigError(
                    f"{path}: pair {entry.pair.id} is served twice "
                    f"({pairs[entry.pair.id].model_dir} and {entry.model_dir}); keep one entry"
                )
            pairs[entry.pair.id] = entry
        for model_id, entries in _by_model(pairs.values()).items():
            if model_id in models:
                raise ConfigError(
                    f"{path}: model {model_id} has a [[model]] table and [[pair]] tables; "
                    "declare it one way"
                )
            models[model_id] = _explicit_model(model_id, entries, path)
        registry = cls(path, models)
        registry._check_overlaps()
        return registry

    def _check_overlaps(self) -> None:
        for i, model in enumerate(self._multilingual):
            for pid, other in self._by_pair.items():
                if model.serves(Pair.parse(pid)):
                    raise ConfigError(
                        f"{self.path}: pair {pid} is served by {model.model_id} and "
                        f"{other.model_id}; keep one"
                    )
            for later in self._multilingual[i + 1 :]:
                a, b = model.languages, later.languages
                assert a is not None and b is not None
                sources, targets = a.sources & b.sources, a.targets & b.targets
                if any(s != t for s in sources for t in targets):
                    raise ConfigError(
                        f"{self.path}: models {model.model_id} and {later.model_id} serve "
                        "some of the same pairs; narrow their sources or targets"
                    )

    def model_for(self, pair: Pair) -> ModelEntry | None:
        """The model serving ``pair``, or None."""
        found = self._by_pair.get(pair.id)
        if found is not None:
            return found
        return next((m for m in self._multilingual if m.serves(pair)), None)

    def entry(self, pair: Pair) -> PairEntry | None:
        """How ``pair`` is translated, or None when no model serves it."""
        model = self.model_for(pair)
        return model.entry(pair) if model is not None else None

    def pair_count(self) -> int:
        return sum(m.pair_count() for m in self.models.values())

    def languages(self) -> set[str]:
        """Every language some model translates from or to."""
        found = {lang for pid in self._by_pair for lang in pid.split("_")}
        for model in self._multilingual:
            assert model.languages is not None
            found |= model.languages.sources | model.languages.targets
        return found

    def sources_for(self, target: str) -> set[str]:
        """The languages some model translates into ``target`` from."""
        found = {pid.split("_")[0] for pid in self._by_pair if pid.split("_")[1] == target}
        for model in self._multilingual:
            spec = model.languages
            assert spec is not None
            if target in spec.targets:
                found |= spec.sources - {target}
        return found

    @cached_property
    def pairs(self) -> Mapping[str, PairEntry]:
        """Every pair's entry, by pair id (multilingual models expanded: may be large)."""
        out: dict[str, PairEntry] = {}
        for model in self.models.values():
            for pair in model.pairs():
                entry = model.entry(pair)
                assert entry is not None
                out[pair.id] = entry
        return out

    def models_for(
        self, models: Iterable[str] | None = None, pairs: Iterable[Pair | str] | None = None
    ) -> list[ModelEntry]:
        """The models named (by id) or serving ``pairs`` (all when both are None), after
        checking their files exist."""
        chosen: dict[str, ModelEntry] = {}
        for model_id in models or ():
            model = self.models.get(model_id)
            if model is None:
                known = ", ".join(sorted(self.models)) or "none"
                raise ConfigError(f"model {model_id} is not in {self.path} (models: {known})")
            chosen[model_id] = model
        for pair in pairs or ():
            wanted = pair if isinstance(pair, Pair) else _parse_pair(pair, self.path)
            model = self.model_for(wanted)
            if model is None:
                raise ConfigError(
                    f"pair {wanted.id} is not in {self.path} ({self.describe()}); add a model "
                    "that serves it (`babelstream models add argos --pair "
                    f"{wanted.id}`, or a [[model]] table listing both languages)"
                )
            chosen[model.model_id] = model
        if models is None and pairs is None:
            chosen = dict(self.models)
        for model in chosen.values():
            problems = model.problems()
            if problems:
                raise ConfigError(f"{self.path}: model {model.model_id}: " + "; ".join(problems))
        return list(chosen.values())

    def entries(self, pairs: Iterable[Pair | str] | None = None) -> list[PairEntry]:
        """Entries for ``pairs`` (every explicit pair when None), after checking their files."""
        wanted = (
            [p for m in self.models.values() for p in m.explicit]
            if pairs is None
            else [str(p) for p in pairs]
        )
        chosen: list[PairEntry] = []
        for pair_id in dict.fromkeys(wanted):
            model = self.models_for(pairs=[pair_id])[0]
            entry = model.entry(_parse_pair(pair_id, self.path))
            assert entry is not None
            chosen.append(entry)
        return chosen

    def describe(self) -> str:
        """The models and how many pairs each serves, for messages."""
        if not self.models:
            return "no models"
        return "; ".join(
            f"{m.model_id}: {', '.join(p.id for p in m.pairs())}"
            if m.pair_count() <= 6
            else f"{m.model_id}: {m.pair_count()} pairs"
            for m in self.models.values()
        )

    def add(self, entry: PairEntry) -> None:
        """Append ``entry`` to the registry file (creating it), refusing a pair served already."""
        served = self.model_for(entry.pair)
        if served is not None:
            raise ConfigError(
                f"{self.path}: pair {entry.pair.id} is already served by "
                f"{served.model_id} ({served.model_dir}); remove that entry first"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write("\n" + _entry_toml(entry, self.path.parent.resolve()))

    def save(self, header: str = "") -> None:
        """(Re)write the whole file with its [[pair]] tables: ``header`` (comment lines), then
        every explicit pair (multilingual [[model]] tables are written by hand)."""
        if self._multilingual:
            raise ConfigError(f"{self.path}: has [[model]] tables; edit it by hand")
        base = self.path.parent.resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = "\n".join(
            _entry_toml(entry, base) for m in self.models.values() for entry in m.explicit.values()
        )
        self.path.write_text(header + "\n" + body, encoding="utf-8")


def models_of(entries: Iterable[PairEntry | ModelEntry]) -> list[ModelEntry]:
    """Models as given, and pair entries grouped into the models they name (by model id)."""
    models: dict[str, ModelEntry] = {}
    pairs: list[PairEntry] = []
    for entry in entries:
        if isinstance(entry, ModelEntry):
            models[entry.model_id] = entry
        else:
            pairs.append(entry)
    for model_id, grouped in _by_model(pairs).items():
        models[model_id] = _explicit_model(model_id, grouped, Path("(entries)"))
    return list(models.values())


def _parse_pair(pair_id: str, path: Path) -> Pair:
    try:
        return Pair.parse(pair_id)
    except ContractError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _by_model(entries: Iterable[PairEntry]) -> dict[str, list[PairEntry]]:
    grouped: dict[str, list[PairEntry]] = {}
    for entry in entries:
        grouped.setdefault(entry.model_id, []).append(entry)
    return grouped


def _explicit_model(model_id: str, entries: list[PairEntry], path: Path) -> ModelEntry:
    """The model of the [[pair]] tables that name ``model_id``: they must agree on it."""
    first = entries[0]
    for entry in entries[1:]:
        for what in ("model_dir", "compute_type", "decoding"):
            if getattr(entry, what) != getattr(first, what):
                raise ConfigError(
                    f"{path}: pairs {first.pair.id} and {entry.pair.id} name model {model_id} "
                    f"with different {what} ({getattr(first, what)} and "
                    f"{getattr(entry, what)}); give them different model_id values"
                )
    try:
        check_model_id(model_id)
    except ContractError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return ModelEntry(
        model_id=model_id,
        model_dir=first.model_dir,
        compute_type=first.compute_type,
        decoding=first.decoding,
        description=first.description,
        explicit={e.pair.id: e for e in entries},
    )


def _model(item: Any, base: Path, where: str) -> ModelEntry:
    """A [[model]] table: a multilingual model and the pairs of its languages."""
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = set(item) - _MODEL_KEYS
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_MODEL_KEYS)}"
        )
    languages = item.get("languages")
    if not (
        isinstance(languages, list)
        and len(languages) >= 2
        and all(isinstance(lang, str) and is_language_tag(lang) for lang in languages)
    ):
        raise ConfigError(f"{where}: 'languages' must list two or more BCP-47 tags")
    if len(set(languages)) != len(languages):
        raise ConfigError(f"{where}: 'languages' lists a tag twice")
    subsets = {}
    for key in ("sources", "targets"):
        subset = item.get(key) or languages
        if not isinstance(subset, list) or not set(subset) <= set(languages):
            raise ConfigError(f"{where}: '{key}' must be a subset of 'languages'")
        subsets[key] = frozenset(subset)
    explicit_tokens = item.get("language_tokens", {})
    fmt = item.get("language_token", "{lang}")
    if not isinstance(explicit_tokens, dict) or not isinstance(fmt, str) or "{lang}" not in fmt:
        raise ConfigError(
            f"{where}: 'language_tokens' must be a table and 'language_token' a string "
            "holding {lang}"
        )
    tokens = {
        lang: str(explicit_tokens.get(lang, fmt.replace("{lang}", lang))) for lang in languages
    }
    suppress = _tokens(item, "suppress_tokens", where)
    if item.get("suppress_language_tokens", False):
        suppress = tuple(dict.fromkeys([*suppress, *tokens.values()]))
    template = _entry(
        {
            "id": f"{languages[0]}_{languages[1]}",
            **{k: v for k, v in item.items() if k in _KEYS and k != "suppress_tokens"},
            "suppress_tokens": list(suppress),
        },
        base,
        where,
    )
    spec = Languages(
        languages=tuple(languages),
        sources=subsets["sources"],
        targets=subsets["targets"],
        tokens=tokens,
        target_prefix=_tokens(item, "target_prefix", where),
        source_prefix=_tokens(item, "source_prefix", where),
        source_suffix=_tokens(item, "source_suffix", where),
        suppress_tokens=suppress,
    )
    for templates in (spec.target_prefix, spec.source_prefix, spec.source_suffix):
        for t in templates:
            if t.replace("{src}", "").replace("{tgt}", "").count("{"):
                raise ConfigError(f"{where}: token {t!r}: only {{src}} and {{tgt}} are filled in")
    try:
        check_model_id(template.model_id)
    except ContractError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return ModelEntry(
        model_id=template.model_id,
        model_dir=template.model_dir,
        compute_type=template.compute_type,
        decoding=template.decoding,
        description=template.description,
        languages=spec,
        template=template,
    )


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
    for key in ("description", "source", "licence"):
        if getattr(entry, key):
            lines.append(f"{key} = {_toml_str(getattr(entry, key))}")
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
        source=str(item.get("source", "")),
        licence=str(item.get("licence", "")),
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


def registry_models(path: Path) -> list[str]:
    """The model ids of the registry at ``path`` (none when it cannot be read: the worker
    says why, and creates its models' topics itself)."""
    try:
        return sorted(Registry.load(path).models)
    except ConfigError:
        return []
