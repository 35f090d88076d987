"""`babelstream models add`: each source to a registry entry, each bad one to one line and
nothing registered (archives built here; downloads from a local HTTP server)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pipeline.cli.main import main
from pipeline.contract.pairs import Pair
from pipeline.engine.imports.sources import licence_of, opus_release
from pipeline.engine.registry import Registry
from pipeline.errors import EXIT_USAGE, ModelSourceError
from tests.model_archives import ARGOS_METADATA, argos_package, serving
from tests.model_archives import opus_release as opus_zip


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("archives")
    argos_package(folder / "translate-en_en-XA-1_0.argosmodel")
    opus_zip(folder / "opus-en-de.zip", ("en",), ("de",))
    opus_zip(folder / "opus-en-mul.zip", ("en",), ("de", "fr"))
    return folder


def add(registry: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    downloads = {"BABELSTREAM_MODELS__DOWNLOAD_DIR": str(registry.parent / "downloads")}
    return CliRunner().invoke(
        main,
        ["models", "add", *args, "--registry", str(registry)],
        env={**downloads, **(env or {})},
    )


def state(registry: Path) -> tuple[str | None, list[str]]:
    """The registry's text and the model folders beside it."""
    text = registry.read_text() if registry.exists() else None
    folders = (
        sorted(p.name for p in registry.parent.iterdir() if p.is_dir())
        if registry.parent.exists()
        else []
    )
    return text, [f for f in folders if f != "downloads"]


def one_line(result: Result) -> str:
    assert result.exit_code == EXIT_USAGE, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    return lines[0]


def test_an_argos_package_is_registered_as_it_is(archives, tmp_path):
    registry = tmp_path / "reg" / "registry.toml"
    result = add(registry, str(archives / "translate-en_en-XA-1_0.argosmodel"))
    assert result.exit_code == 0, result.output
    added = json.loads(result.stdout)
    assert added["pairs"] == ["en_en-XA"] and added["licence"] == "CC0-1.0"
    assert added["sample"] and added["sample"] != "Hello, world."
    assert "stanza/ sentence splitter is not used" in result.stderr
    entry = Registry.load(registry).entry(Pair("en", "en-XA"))
    assert entry is not None and entry.target_prefix == (">>en-XA<<",)
    assert entry.source == "argos:translate-en_en-XA@1.0"
    assert (entry.model_dir / "model.bin").is_file() and entry.source_tokenizer.is_file()
    listed = CliRunner().invoke(main, ["models", "list", "--registry", str(registry)]).stdout
    assert "argos:translate-en_en-XA@1.0" in listed and "CC0-1.0" in listed


def test_an_opus_release_is_converted_with_its_licence(archives, tmp_path):
    registry = tmp_path / "reg" / "registry.toml"
    result = add(registry, str(archives / "opus-en-de.zip"))
    assert result.exit_code == 0, result.output
    model = Registry.load(registry).models["opus-mt-en-de"]
    entry = model.entry(Pair("en", "de"))
    assert entry is not None and entry.licence == "CC-BY-4.0"
    assert entry.source_tokenizer.name == "source.spm"
    assert (model.model_dir / "model.bin").is_file()


def test_a_release_of_several_targets_is_one_model_with_target_tokens(archives, tmp_path):
    registry = tmp_path / "reg" / "registry.toml"
    result = add(registry, str(archives / "opus-en-mul.zip"))
    assert result.exit_code == 0, result.output
    loaded = Registry.load(registry)
    assert list(loaded.models) == ["opus-mt-en-mul2"]
    model = loaded.models["opus-mt-en-mul2"]
    assert model.languages is not None and sorted(p.id for p in model.pairs()) == ["en_de", "en_fr"]
    fr = model.entry(Pair("en", "fr"))
    assert fr is not None and fr.source_prefix == (">>fr<<",)


def test_a_served_pair_is_refused_before_anything_changes_and_replaced_with_force(
    archives, tmp_path
):
    registry = tmp_path / "reg" / "registry.toml"
    assert add(registry, str(archives / "opus-en-de.zip")).exit_code == 0
    before = state(registry)
    line = one_line(add(registry, str(archives / "opus-en-mul.zip")))
    assert "en_de is already served by opus-mt-en-de" in line and "--force" in line
    assert state(registry) == before
    assert add(registry, str(archives / "opus-en-mul.zip"), "--force").exit_code == 0
    loaded = Registry.load(registry)
    served = loaded.model_for(Pair("en", "de"))
    assert served is not None and served.model_id == "opus-mt-en-mul2"
    # the replaced model keeps its folder (another pair could share it) but no entry
    assert set(loaded.models) == {"opus-mt-en-mul2"}


def _bad_zip(tmp_path: Path, archives: Path) -> str:
    data = (archives / "translate-en_en-XA-1_0.argosmodel").read_bytes()
    path = tmp_path / "corrupt.argosmodel"
    path.write_bytes(data[: len(data) // 2])
    return str(path)


def _no_pair(tmp_path: Path, archives: Path) -> str:
    metadata = {k: v for k, v in ARGOS_METADATA.items() if k not in ("from_code", "to_code")}
    return str(argos_package(tmp_path / "nopair.argosmodel", metadata))


def _does_not_load(tmp_path: Path, archives: Path) -> str:
    path = tmp_path / "broken.argosmodel"
    with (
        zipfile.ZipFile(archives / "translate-en_en-XA-1_0.argosmodel") as source,
        zipfile.ZipFile(path, "w") as out,
    ):
        for item in source.infolist():
            data = source.read(item)
            out.writestr(item, data[:1000] if item.filename.endswith("model.bin") else data)
    return str(path)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_bad_zip, "not a zip archive or corrupt"),
        (_no_pair, "names no pair (from_code and to_code)"),
        (_does_not_load, "the model does not load or translate"),
    ],
    ids=["corrupt-zip", "metadata-without-pair", "model-fails-to-load"],
)
def test_a_bad_archive_is_one_line_and_registers_nothing(archives, tmp_path, make, words):
    registry = tmp_path / "reg" / "registry.toml"
    assert add(registry, str(archives / "opus-en-de.zip")).exit_code == 0
    before = state(registry)
    assert words in one_line(add(registry, make(tmp_path, archives)))
    assert state(registry) == before
    assert not [p for p in registry.parent.iterdir() if p.name.startswith(".")]


def test_downloads_from_an_index_check_pairs_and_checksums(archives, tmp_path):
    package = (archives / "translate-en_en-XA-1_0.argosmodel").read_bytes()
    registry = tmp_path / "reg" / "registry.toml"
    with serving({"/p.argosmodel": package}) as server:
        entry = {**ARGOS_METADATA, "links": [server.url("p.argosmodel")]}
        server.files["/index.json"] = json.dumps([entry]).encode()
        wrong = {**entry, "sha256": "0" * 64}
        server.files["/wrong.json"] = json.dumps([wrong]).encode()
        index = server.url("index.json")
        line = one_line(add(registry, index, "--pair", "en_de"))
        assert "no package for en_de (it lists en_en-XA)" in line
        wrong_index = server.url("wrong.json")
        assert "checksum mismatch" in one_line(add(registry, wrong_index, "--pair", "en_en-XA"))
        assert state(registry) == (None, [])
        line = one_line(add(registry, index))
        assert "--pair" in line
        given = one_line(add(registry, index, "--pair", "en_en-XA", "--sha256", "2" * 64))
        assert "checksum mismatch" in given and "2" * 64 in given
        result = add(registry, index, "--pair", "en_en-XA")
        assert result.exit_code == 0, result.output
        sha = hashlib.sha256(package).hexdigest()
        url = server.url("p.argosmodel")
        other = tmp_path / "b" / "r.toml"
        assert "checksum mismatch" in one_line(add(other, url, "--sha256", "1" * 64))
        assert add(tmp_path / "c" / "r.toml", url, "--sha256", sha).exit_code == 0
    assert Registry.load(registry).entry(Pair("en", "en-XA")) is not None


def test_a_folder_of_installed_packages_moves_over_whole_or_says_which_failed(archives, tmp_path):
    folder = tmp_path / "packages"
    folder.mkdir()
    for name, metadata in (
        ("good", None),
        ("nopair", {k: v for k, v in ARGOS_METADATA.items() if k != "to_code"}),
        ("sbd", {**ARGOS_METADATA, "type": "sbd"}),
    ):
        with zipfile.ZipFile(argos_package(tmp_path / f"{name}.argosmodel", metadata)) as z:
            z.extractall(folder / name)
        (folder / name / "translate-en_en-XA-1_0").rename(folder / f"{name}-pkg")
        (folder / name).rmdir()
    registry = tmp_path / "reg" / "registry.toml"
    result = add(registry, str(folder))
    assert result.exit_code == EXIT_USAGE
    assert "skipped sbd-pkg: a sbd package" in result.stderr
    assert "names no pair" in result.stderr and "1 of 3 packages were not added" in result.stderr
    assert [m for m in Registry.load(registry).models] == ["argos-en-en-XA"]


def test_a_hugging_face_name_without_pytorch_names_the_install(tmp_path, monkeypatch):
    monkeypatch.setattr("pipeline.engine.convert.TRAIN_PYTHON", tmp_path / "no-venv" / "python")
    line = one_line(add(tmp_path / "r.toml", "Helsinki-NLP/opus-mt-en-de"))
    assert "make train-env" in line
    line = one_line(add(tmp_path / "r.toml", "facebook/nllb-200-distilled-600M"))
    assert "--pair" in line and "[[model]]" in line


def test_an_unknown_source_is_one_line(tmp_path):
    assert "not a URL" in one_line(add(tmp_path / "r.toml", str(tmp_path / "nothing.zip")))


def test_opus_languages_come_from_the_pair_the_readme_or_the_name(tmp_path):
    assert opus_release(tmp_path, Pair("en", "de"), "x.zip").targets == ("de",)
    release = opus_release(tmp_path, None, "https://h/OPUS-MT-models/en-fi/opus-2020-02-26.zip")
    assert (release.sources, release.targets) == (("en",), ("fi",))
    assert opus_release(tmp_path, None, "opus-mt-fr-en.zip").sources == ("fr",)
    with pytest.raises(ModelSourceError, match="--pair"):
        opus_release(tmp_path, None, "opus-2020-02-26.zip")
    (tmp_path / "README.md").write_text(
        "* source language(s): deu\n* target language(s): eng zho_Hant\n"
    )
    release = opus_release(tmp_path, None, "x.zip")
    assert release.targets == ("eng", "zho-Hant") and release.multilingual
    assert release.target_token("zho-Hant") == ">>zho_Hant<<"


def test_the_licence_is_what_the_source_declares(tmp_path):
    assert licence_of(tmp_path) == ""
    (tmp_path / "LICENSE").write_text("\nAttribution 4.0 International\n")
    assert licence_of(tmp_path) == "CC-BY-4.0"
    (tmp_path / "README.md").write_text("* License: Apache-2.0\n")
    assert licence_of(tmp_path) == "Apache-2.0"
