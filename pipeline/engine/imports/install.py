"""``babelstream models add``: from a model source to a registered, served pair.

Each model goes through the same steps, in a staging folder beside the
registry's models (so the last move is a rename on one file system):

1. **locate**: a URL is downloaded (:mod:`.download`), an Argos index is read
   for the pairs asked for, a Hugging Face name is converted where PyTorch is;
2. **read**: the archive is unpacked and recognised (:mod:`.sources`);
3. **build**: an Argos model is copied as it is, an OPUS-MT release converted
   by CTranslate2's Marian converter;
4. **check**: the staged model is loaded by the engine the worker runs and
   translates a sentence;
5. **register**: refused when a pair is served already (``force`` replaces
   it), then the folder is moved in and the registry rewritten in one rename.

Any failure before the last step leaves the registry and its models as they
were. Failure classes: :class:`~pipeline.errors.ModelSourceError` for a source
that cannot be imported (one line, nothing registered),
:class:`~pipeline.errors.ServiceUnavailable` for a download that kept failing
(run it again: it resumes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomlkit
from tomlkit.items import AoT

from pipeline.contract.pairs import Pair
from pipeline.engine.convert import convert_model, find_tokenizers, run_in_train_env
from pipeline.engine.imports.download import download, file_name, is_url, sha256_of
from pipeline.engine.imports.sources import (
    ArgosPackage,
    OpusRelease,
    argos_package,
    argos_packages,
    choose,
    index_entries,
    is_opus_release,
    iter_languages,
    opus_release,
    published_sha256,
    unpack,
)
from pipeline.engine.registry import Registry
from pipeline.errors import BabelStreamError, ConfigError, ModelSourceError, ServiceUnavailable
from pipeline.settings import ModelImportSettings

TableKind = Literal["pair", "model"]
# owner/name, as the Hugging Face hub names models
_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# the trial translation every staged model must give before it is registered
_TRIAL_TEXT = "Hello, world."
# Argos models are trained on sentences (Argos splits with stanza first); OPUS-MT on
# Marian's 512 positions. Longer texts are cut at sentences by the engine.
_ARGOS_INPUT_TOKENS = 256
_OPUS_INPUT_TOKENS = 512
_OUTPUT_TOKENS = 512
_REGISTRY_HEADER = (
    "Model registry: which CTranslate2 model serves which language pairs.\n"
    "Paths are relative to this file; tokenizers are relative to the model dir.\n"
    "`babelstream models add SOURCE` adds entries here. See pipeline/engine/registry.py."
)


@dataclass(frozen=True)
class Imported:
    """One model that was added: where it lives and what it serves."""

    model_id: str
    model_dir: Path
    pairs: tuple[str, ...]
    source: str
    licence: str
    sample: str
    # model.bin: about what a worker holds in memory for it (CTranslate2 loads its weights)
    model_bytes: int
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for the person who ran the import."""
        pairs = ", ".join(self.pairs[:6]) + (
            f" and {len(self.pairs) - 6} more" if len(self.pairs) > 6 else ""
        )
        licence = f", licence {self.licence}" if self.licence else ""
        size = f"{self.model_bytes / 1e6:.1f} MB"
        return (
            f"added {self.model_id} ({pairs}) from {self.source}{licence}, model.bin {size} "
            f"-> {self.model_dir}"
        )


@dataclass
class _Staged:
    """A model built in the staging folder, with the registry table that serves it."""

    model_id: str
    folder: Path
    kind: TableKind
    table: dict[str, Any]
    source: str
    licence: str
    notes: list[str] = field(default_factory=list)


class ModelImporter:
    """Adds models from their sources to the registry at ``registry``; the model folders go
    beside it (``<registry dir>/<model id>``)."""

    def __init__(
        self,
        registry: Path,
        settings: ModelImportSettings,
        *,
        force: bool = False,
        progress: bool | None = None,
        say: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.registry = registry.resolve()
        self.models_dir = self.registry.parent
        self.settings = settings
        self.force = force
        self.progress = progress
        self.say = say

    def add(
        self,
        source: str,
        pairs: Sequence[Pair] = (),
        *,
        sha256: str | None = None,
        model_id: str | None = None,
    ) -> list[Imported]:
        """Import ``source`` (see ``babelstream models add --help``); the models added."""
        if source == "argos" or source.endswith(".json"):
            index = self.settings.argos_index if source == "argos" else source
            return self._from_index(index, pairs, model_id, sha256)
        if is_url(source):
            archive = download(source, self.settings, sha256=sha256, progress=self.progress)
            return self._from_path(archive, pairs, source, model_id)
        path = Path(source)
        if path.exists():
            if sha256 and path.is_file() and sha256_of(path) != sha256.lower():
                raise ModelSourceError(
                    f"{path}: checksum mismatch (sha256 {sha256_of(path)}, expected "
                    f"{sha256.lower()})"
                )
            return self._from_path(path.resolve(), pairs, source, model_id)
        if _HUB_NAME.fullmatch(source):
            return [self._from_hub(source, pairs, model_id)]
        raise ModelSourceError(
            f"{source}: no such file or folder, and not a URL, an Argos index or a Hugging "
            "Face name (owner/name)"
        )

    # -- locate ------------------------------------------------------------------------

    def _from_index(
        self, index: str, pairs: Sequence[Pair], model_id: str | None, sha256: str | None
    ) -> list[Imported]:
        if not pairs:
            raise ModelSourceError(f"{index}: name the pair(s) to import with --pair SRC_TGT")
        local = index if not is_url(index) else download(index, self.settings, progress=False)
        try:
            parsed = json.loads(Path(local).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelSourceError(f"{index}: cannot read the package index ({exc})") from None
        entries = index_entries(parsed, index)
        for pair in pairs:
            choose(entries, pair, index)  # every pair listed, before any download
        self._refuse_served([p.id for p in pairs], None)
        added: list[Imported] = []
        for pair in pairs:
            entry = choose(entries, pair, index)
            links = [str(link) for link in entry["links"]]
            sha = sha256 or published_sha256(entry)
            archive = self._first_download(links, sha)
            added += self._from_path(archive, [pair], links[0], model_id)
        return added

    def _first_download(self, links: list[str], sha256: str | None) -> Path:
        """The first of ``links`` that downloads whole (an index lists mirrors)."""
        failed: list[ServiceUnavailable | ModelSourceError] = []
        for link in links:
            try:
                return download(link, self.settings, sha256=sha256, progress=self.progress)
            except (ServiceUnavailable, ModelSourceError) as exc:
                failed.append(exc)
                if link != links[-1]:
                    self.say(f"{exc}; trying the next link")
        # unavailable if any mirror was (a later run may get it), else the source is bad
        worst = next((e for e in failed if isinstance(e, ServiceUnavailable)), failed[-1])
        raise worst

    def _from_path(
        self, path: Path, pairs: Sequence[Pair], named: str, model_id: str | None
    ) -> list[Imported]:
        self.models_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.models_dir, prefix=".import-") as tmp:
            staging = Path(tmp)
            root = path if path.is_dir() else unpack(path, staging / "unpacked")
            if (root / "metadata.json").is_file():
                return self._argos([argos_package(root)], pairs, staging, model_id)
            if is_opus_release(root):
                release = opus_release(root, pairs[0] if pairs else None, named)
                return [self._install(self._opus(release, staging, named, model_id), named)]
            if path.is_dir():
                return self._argos(argos_packages(root), pairs, staging, model_id)
        raise ModelSourceError(
            f"{named}: neither an Argos package (metadata.json, model/) nor an OPUS-MT release "
            "(a .npz model and its .vocab.yml)"
        )

    def _argos(
        self,
        packages: list[ArgosPackage],
        pairs: Sequence[Pair],
        staging: Path,
        model_id: str | None,
    ) -> list[Imported]:
        """Install each package (a folder of them: one failing does not stop the others)."""
        wanted = {p.id for p in pairs}
        added: list[Imported] = []
        failed: list[str] = []
        for package in packages:
            if not package.is_translation:
                self.say(
                    f"skipped {package.root.name}: a {package.metadata.get('type')} package, "
                    "not a translation model"
                )
                continue
            try:
                if wanted and package.pair.id not in wanted:
                    if len(packages) == 1:
                        raise ModelSourceError(
                            f"{package.root}: the package translates {package.pair.id}, not "
                            f"{', '.join(sorted(wanted))}"
                        )
                    continue
                staged = self._argos_model(package, staging, model_id)
                added.append(self._install(staged, str(package.root)))
            except ModelSourceError as exc:
                if len(packages) == 1:
                    raise
                failed.append(str(exc))
                self.say(f"not added: {exc}")
        if failed:
            raise ModelSourceError(
                f"{len(failed)} of {len(packages)} packages were not added (the lines above say "
                f"why); {len(added)} added"
            )
        return added

    def _from_hub(self, name: str, pairs: Sequence[Pair], model_id: str | None) -> Imported:
        pair = pairs[0] if pairs else _hub_pair(name)
        model_id = model_id or name.rsplit("/", 1)[-1]
        self.models_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.models_dir, prefix=".import-") as tmp:
            folder = Path(tmp) / model_id
            args = ["--from", "transformers", "--quantization", self.settings.quantization]
            run_in_train_env("pipeline.engine.convert", [*args, "--output", str(folder), name])
            tokenizers = find_tokenizers(folder)
            if tokenizers is None:
                raise ModelSourceError(f"{name}: the converted model has no SentencePiece model")
            table: dict[str, Any] = {
                "id": pair.id,
                "model": model_id,
                "model_id": model_id,
                "source_tokenizer": tokenizers.source,
                "target_tokenizer": tokenizers.target,
                "source_suffix": ["</s>"],
                "max_input_tokens": _OPUS_INPUT_TOKENS,
                "max_output_tokens": _OUTPUT_TOKENS,
                "source": f"huggingface:{name}",
            }
            staged = _Staged(model_id, folder, "pair", table, f"huggingface:{name}", "")
            return self._install(staged, name)

    # -- build -------------------------------------------------------------------------

    def _argos_model(self, package: ArgosPackage, staging: Path, model_id: str | None) -> _Staged:
        package.check_files()
        model_id = model_id or package.model_id
        folder = staging / model_id
        shutil.copytree(package.root / "model", folder)
        for name in ("sentencepiece.model", "metadata.json", "README.md", "LICENSE"):
            if (package.root / name).is_file():
                shutil.copyfile(package.root / name, folder / name)
        table: dict[str, Any] = {
            "id": package.pair.id,
            "model": model_id,
            "model_id": model_id,
            "tokenizer": "sentencepiece.model",
            "target_prefix": list(package.target_prefix),
            "max_input_tokens": _ARGOS_INPUT_TOKENS,
            "max_output_tokens": _OUTPUT_TOKENS,
            "source": package.source,
        }
        staged = _Staged(model_id, folder, "pair", table, package.source, package.licence)
        if (package.root / "stanza").is_dir():
            staged.notes.append(
                "its stanza/ sentence splitter is not used: the engine cuts long texts at "
                "sentences itself"
            )
        return staged

    def _opus(
        self, release: OpusRelease, staging: Path, named: str, model_id: str | None
    ) -> _Staged:
        model_id = model_id or release.model_id
        folder = staging / model_id
        try:
            convert_model("marian", str(release.root), folder, self.settings.quantization)
        except ConfigError as exc:
            raise ModelSourceError(f"{named}: {exc}") from None
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            raise ModelSourceError(f"{named}: the Marian converter failed: {exc}") from None
        for name in ("README.md", "LICENSE"):
            if (release.root / name).is_file():
                shutil.copyfile(release.root / name, folder / name)
        tokenizers = find_tokenizers(folder)
        if tokenizers is None:
            raise ModelSourceError(f"{named}: no SentencePiece model (source.spm, target.spm)")
        source = f"opus-mt:{file_name(named) if is_url(named) else Path(named).name}"
        common: dict[str, Any] = {
            "model": model_id,
            "model_id": model_id,
            "source_tokenizer": tokenizers.source,
            "target_tokenizer": tokenizers.target,
            "max_input_tokens": _OPUS_INPUT_TOKENS,
            "max_output_tokens": _OUTPUT_TOKENS,
            "source": source,
        }
        if release.licence:
            common["licence"] = release.licence
        if not release.multilingual:
            pair = Pair(release.sources[0], release.targets[0])
            return _Staged(
                model_id, folder, "pair", {"id": pair.id, **common}, source, release.licence
            )
        languages = list(iter_languages(release))
        table: dict[str, Any] = {
            **common,
            "languages": languages,
            "sources": list(release.sources),
            "targets": list(release.targets),
        }
        if len(release.targets) > 1:  # the release reads its target from a >>tgt<< token
            table["language_tokens"] = {tag: release.target_token(tag) for tag in languages}
            table["source_prefix"] = ["{tgt}"]
            # only the targets' tokens are in its vocabulary
            table["suppress_tokens"] = [release.target_token(t) for t in release.targets]
        return _Staged(model_id, folder, "model", table, source, release.licence)

    # -- check and register ------------------------------------------------------------

    def _install(self, staged: _Staged, named: str) -> Imported:
        if staged.licence and "licence" not in staged.table:
            staged.table["licence"] = staged.licence
        pairs, sample = self._check(staged, named)
        target = self.models_dir / staged.model_id
        self._register(staged, pairs, target)
        imported = Imported(
            staged.model_id,
            target,
            pairs,
            staged.source,
            staged.licence,
            sample,
            (target / "model.bin").stat().st_size,
            tuple(staged.notes),
        )
        self.say(imported.describe())
        for note in staged.notes:
            self.say(f"  {note}")
        return imported

    def _check(self, staged: _Staged, named: str) -> tuple[tuple[str, ...], str]:
        """Load the staged model with the worker's engine and translate a sentence; the pairs
        it serves and that translation."""
        from pipeline.engine.translator import CTranslate2Translator

        table = {**staged.table, "model": str(staged.folder)}
        try:
            model = Registry.from_dict(
                {staged.kind: [table]}, base=staged.folder.parent, path=Path(named)
            ).models_for()[0]
            first = next(model.pairs())
            engine = CTranslate2Translator(
                [model], device="cpu", inter_threads=1, intra_threads=1, prepared_texts=0
            )
            sample = engine.translate_batch([_TRIAL_TEXT], first)[0].text
        except (BabelStreamError, RuntimeError, ValueError, OSError) as exc:
            raise ModelSourceError(
                f"{named}: the model does not load or translate: {exc}"
            ) from None
        pairs = tuple(p.id for p in model.pairs())
        return pairs, sample

    def _refuse_served(self, pairs: Sequence[str], model_id: str | None) -> set[str]:
        """The pairs (of ``pairs``) that another model serves, which ``force`` replaces;
        ModelSourceError without ``force``, or when a multilingual model serves one."""
        if not self.registry.exists():
            return set()
        current = Registry.load(self.registry)
        replaced: set[str] = set()
        for pair_id in pairs:
            served = current.model_for(Pair.parse(pair_id))
            if served is None:
                continue
            if not self.force:
                raise ModelSourceError(
                    f"pair {pair_id} is already served by {served.model_id} "
                    f"({served.model_dir}); pass --force to replace it"
                )
            if served.languages is not None and served.model_id != model_id:
                raise ModelSourceError(
                    f"pair {pair_id} is served by the multilingual model {served.model_id}; "
                    f"narrow its languages in {self.registry} first"
                )
            replaced.add(pair_id)
        if model_id in current.models and not self.force:
            raise ModelSourceError(
                f"model {model_id} is in {self.registry} already; pass --force to replace it"
            )
        return replaced

    def _register(self, staged: _Staged, pairs: tuple[str, ...], target: Path) -> None:
        """Refuse a pair served already (unless ``force``), then move the model in and
        rewrite the registry; on a registry that then fails to load, put both back."""
        current = Registry.load(self.registry) if self.registry.exists() else None
        replaced = self._refuse_served(pairs, staged.model_id)
        if target.exists() and not self.force:
            raise ModelSourceError(f"{target} exists; pass --force to replace it")
        before = self.registry.read_text(encoding="utf-8") if current is not None else None
        document = _edited(before, staged, replaced)
        old = target.with_name(f".{target.name}.replaced")
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
        os.replace(staged.folder, target)
        _write_atomically(self.registry, tomlkit.dumps(document))
        try:
            Registry.load(self.registry).models_for(models=[staged.model_id])
        except ConfigError as exc:
            shutil.rmtree(target)
            if old.exists():
                os.replace(old, target)
            if before is None:
                self.registry.unlink()
            else:
                _write_atomically(self.registry, before)
            raise ModelSourceError(f"the registry would not load with the model: {exc}") from None
        shutil.rmtree(old, ignore_errors=True)


def _edited(before: str | None, staged: _Staged, replaced: set[str]) -> tomlkit.TOMLDocument:
    """The registry with ``staged``'s table appended, after removing the tables of the same
    model and of the pairs it replaces (comments and other tables kept)."""
    document = tomlkit.parse(before) if before is not None else _new_registry()
    for kind in ("pair", "model"):
        tables = document.get(kind)
        if not isinstance(tables, AoT):
            continue
        for i in reversed(range(len(tables))):
            table = tables[i]
            same_model = table.get("model_id", Path(str(table.get("model"))).name)
            if same_model == staged.model_id or table.get("id") in replaced:
                del tables[i]
    if not isinstance(document.get(staged.kind), AoT):
        document.append(staged.kind, tomlkit.aot())
    table = tomlkit.table()
    for key, value in staged.table.items():
        if isinstance(value, dict):
            inline = tomlkit.inline_table()
            inline.update(value)
            table.add(key, inline)
        else:
            table.add(key, value)
    table.add(tomlkit.nl())
    document[staged.kind].append(table)
    return document


def _new_registry() -> tomlkit.TOMLDocument:
    document = tomlkit.document()
    for line in _REGISTRY_HEADER.splitlines():
        document.add(tomlkit.comment(line))
    document.add(tomlkit.nl())
    return document


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _hub_pair(name: str) -> Pair:
    """The pair a Hugging Face name spells (``Helsinki-NLP/opus-mt-en-de``)."""
    found = re.search(r"opus-mt(?:-tc-[a-z]+)?-([a-z]{2,3})-([a-z]{2,3})$", name.lower())
    if found is None:
        raise ModelSourceError(
            f"{name}: its name does not say its pair; give it with --pair SRC_TGT (a "
            "multilingual model, NLLB or M2M-100, needs a [[model]] table: see the models guide)"
        )
    return Pair(found.group(1), found.group(2))
