"""Model registry: shape checks, per-pair file checks, clear errors, `models list`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli.main import main
from pipeline.contract.pairs import Pair
from pipeline.engine.registry import PairEntry, Registry
from pipeline.errors import ConfigError

ENTRY = """
[[pair]]
id = "{pair}"
model = "{model}"
tokenizer = "spm.model"
target_prefix = ">>x<<"
compute_type = "{compute_type}"
"""


def make_model(root: Path, name: str, *, tokenizer: bool = True) -> Path:
    model = root / name
    model.mkdir()
    (model / "model.bin").write_bytes(b"")
    if tokenizer:
        (model / "spm.model").write_bytes(b"")
    return model


def write_registry(root: Path, *entries: dict[str, str]) -> Path:
    text = "".join(ENTRY.format(**{"compute_type": "auto", "model": "m", **e}) for e in entries)
    path = root / "registry.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_loads_entries_with_resolved_paths(tmp_path):
    make_model(tmp_path, "m")
    reg = Registry.load(write_registry(tmp_path, {"pair": "en_de"}, {"pair": "de_en"}))
    entries = reg.entries(["de_en"])
    assert [e.pair for e in entries] == [Pair("de", "en")]
    entry = entries[0]
    assert entry.model_dir == (tmp_path / "m").resolve()
    assert entry.source_tokenizer == entry.model_dir / "spm.model"
    assert entry.target_prefix == (">>x<<",)
    assert entry.model_id == "m"


def test_missing_model_directory(tmp_path):
    reg = Registry.load(write_registry(tmp_path, {"pair": "en_de", "model": "nowhere"}))
    with pytest.raises(ConfigError, match=r"model directory .*nowhere does not exist"):
        reg.entries(["en_de"])


def test_missing_tokenizer(tmp_path):
    make_model(tmp_path, "m", tokenizer=False)
    reg = Registry.load(write_registry(tmp_path, {"pair": "en_de"}))
    with pytest.raises(ConfigError, match=r"source tokenizer .*spm.model does not exist"):
        reg.entries(["en_de"])


def test_unknown_compute_type(tmp_path):
    path = write_registry(tmp_path, {"pair": "en_de", "compute_type": "int3"})
    with pytest.raises(ConfigError, match="unknown compute_type 'int3'"):
        Registry.load(path)


def test_pair_served_twice(tmp_path):
    path = write_registry(tmp_path, {"pair": "en_de"}, {"pair": "en_de", "model": "other"})
    with pytest.raises(ConfigError, match="pair en_de is served twice"):
        Registry.load(path)


def test_only_requested_pairs_are_checked(tmp_path):
    make_model(tmp_path, "m")
    reg = Registry.load(
        write_registry(tmp_path, {"pair": "en_de"}, {"pair": "en_fr", "model": "missing"})
    )
    assert [e.pair.id for e in reg.entries(["en_de"])] == ["en_de"]
    with pytest.raises(ConfigError, match=r"model missing: model directory .*missing does not"):
        reg.entries()


def test_unknown_pair_names_what_is_served(tmp_path):
    make_model(tmp_path, "m")
    reg = Registry.load(write_registry(tmp_path, {"pair": "en_de"}))
    with pytest.raises(ConfigError, match=r"pair en_fr is not in .*\(m: en_de\); add a model"):
        reg.entries(["en_fr"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[pair]]\nid = 'en_de'\n", "'model' is required"),
        ("[[pair]]\nid = 'ende'\nmodel = 'm'\ntokenizer = 't'\n", "invalid pair id"),
        ("[[pair]]\nid = 'en_de'\nmodel = 'm'\n", "set 'tokenizer'"),
        ("[[pair]]\nid = 'en_de'\nmodel = 'm'\ntokenizer = 't'\ntypo = 1\n", "unknown key"),
        ("[[pair]\n", "not valid TOML"),
        ("[models]\n", "unknown top-level key"),
    ],
)
def test_shape_errors(tmp_path, text, message):
    path = tmp_path / "registry.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        Registry.load(path)


def test_missing_registry_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        Registry.load(tmp_path / "none.toml")


def test_add_round_trips_and_refuses_duplicates(tmp_path):
    model = make_model(tmp_path, "opus")
    path = tmp_path / "registry.toml"
    reg = Registry(path=path)
    entry = PairEntry(
        pair=Pair("en", "de"),
        model_dir=model,
        source_tokenizer=model / "spm.model",
        target_tokenizer=model / "spm.model",
        model_id="opus",
        source_suffix=("</s>",),
        compute_type="int8",
        max_input_tokens=512,
    )
    reg.add(entry)
    loaded = Registry.load(path)
    assert loaded.entries(["en_de"]) == [entry]
    with pytest.raises(ConfigError, match="already served"):
        loaded.add(entry)


def test_models_list_json(tmp_path):
    make_model(tmp_path, "m")
    path = write_registry(tmp_path, {"pair": "en_de"}, {"pair": "en_fr", "model": "gone"})
    result = CliRunner().invoke(main, ["models", "list", "--json", "--registry", str(path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    by_pair = {row["pair"]: row for row in doc["pairs"]}
    assert by_pair["en_de"]["ok"] is True
    assert by_pair["en_fr"]["ok"] is False
    assert "does not exist" in by_pair["en_fr"]["problems"][0]


def test_default_registry_serves_both_demo_pairs():
    from pipeline.settings import load_settings

    reg = Registry.load(load_settings().engine.registry)
    assert {"en_en-XA", "en-XA_en"} <= set(reg.pairs)
    entries = reg.entries(["en_en-XA", "en-XA_en"])
    assert len({e.model_dir for e in entries}) == 1


def test_default_demo_entries_match_the_evaluated_ones():
    """The registry serves the demo model exactly as `models eval-demo` measured it."""
    from dataclasses import replace

    from pipeline.demo_model import DEMO_DIR, DEMO_PAIRS
    from pipeline.demo_model.evaluate import demo_entries
    from pipeline.settings import load_settings

    served = Registry.load(load_settings().engine.registry).entries(DEMO_PAIRS)
    assert [replace(e, description="") for e in served] == demo_entries(DEMO_DIR)
    assert served[0].suppress_tokens == (">>en<<", ">>en-XA<<")


MULTILINGUAL = """
[[model]]
model_id = "m2m-small"
model = "m"
tokenizer = "spm.model"
languages = ["en", "de", "fr", "zh-Hans"]
targets = ["de", "fr", "zh-Hans"]
language_token = "__{lang}__"
language_tokens = { "zh-Hans" = "__zh__" }
source_prefix = ["{src}"]
target_prefix = ["{tgt}"]
source_suffix = ["</s>"]
suppress_language_tokens = true
"""


def test_a_multilingual_model_serves_the_pairs_of_its_languages(tmp_path):
    make_model(tmp_path, "m")
    path = tmp_path / "registry.toml"
    path.write_text(MULTILINGUAL, encoding="utf-8")
    reg = Registry.load(path)
    (model,) = reg.models.values()
    # every source language to every target but itself: 4 x 3 - 3 = 9 pairs
    assert model.pair_count() == 9 == len(list(model.pairs()))
    entry = reg.entry(Pair("zh-Hans", "fr"))
    assert entry is not None and entry.model_id == "m2m-small"
    assert (entry.source_prefix, entry.target_prefix) == (("__zh__",), ("__fr__",))
    assert entry.source_suffix == ("</s>",)
    assert set(entry.suppress_tokens) == {"__en__", "__de__", "__fr__", "__zh__"}
    assert reg.entry(Pair("de", "en")) is None, "en is not a target"
    assert reg.model_for(Pair("fr", "fr")) is None
    assert [m.model_id for m in reg.models_for(pairs=["de_fr"])] == ["m2m-small"]


def test_pairs_of_one_model_id_are_one_model_and_must_agree(tmp_path):
    make_model(tmp_path, "m")
    make_model(tmp_path, "other")
    reg = Registry.load(write_registry(tmp_path, {"pair": "en_de"}, {"pair": "de_en"}))
    (model,) = reg.models.values()
    assert sorted(p.id for p in model.pairs()) == ["de_en", "en_de"]
    clash = tmp_path / "clash.toml"
    clash.write_text(
        "[[pair]]\nid = 'en_de'\nmodel = 'm'\nmodel_id = 'x'\ntokenizer = 's'\n"
        "[[pair]]\nid = 'de_en'\nmodel = 'other'\nmodel_id = 'x'\ntokenizer = 's'\n"
    )
    with pytest.raises(ConfigError, match="name model x with different model_dir"):
        Registry.load(clash)


def test_a_pair_is_served_by_one_model_only(tmp_path):
    make_model(tmp_path, "m")
    path = tmp_path / "registry.toml"
    path.write_text(
        MULTILINGUAL + "\n[[pair]]\nid = 'en_de'\nmodel = 'm'\nmodel_id = 'opus'\n"
        "tokenizer = 'spm.model'\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="pair en_de is served by m2m-small and opus"):
        Registry.load(path)


@pytest.mark.parametrize(
    ("model_id", "ok"), [("opus-mt-en-de", True), ("nllb.200", True), ("bad/id", False)]
)
def test_model_ids_name_topics(tmp_path, model_id, ok):
    make_model(tmp_path, "m")
    path = tmp_path / "registry.toml"
    path.write_text(
        f"[[pair]]\nid = 'en_de'\nmodel = 'm'\nmodel_id = '{model_id}'\ntokenizer = 's'\n"
    )
    if ok:
        assert list(Registry.load(path).models) == [model_id]
    else:
        with pytest.raises(ConfigError, match="invalid model id"):
            Registry.load(path)
