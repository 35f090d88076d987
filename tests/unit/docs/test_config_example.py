"""The annotated configuration file of docs/operating/configuration.md cannot go stale.

Its one ```toml block is loaded as a ``BABELSTREAM_CONFIG`` file, and its comments are
held to this convention, key by key:

- each key is on a line of its own and ends with a ``#`` comment saying what it does;
- a value whose comment has no ``(default: X)`` note at its end is the setting's default;
- a value with such a note differs from the default, and X is the default, written as
  TOML writes it (``unset`` for None; a relative path is relative to the project folder,
  as the settings reference shows paths);
- every table is a section of the settings (or an object setting inside one), not a
  development tool's, since the root of the settings skips a table it does not know;
- a mapping setting is one inline table (``weights = { acme = 2.0 }``) on its key's line;
- no secret (a ``SecretStr`` setting) is in the file: the page's commands export them.

A default changed in ``pipeline/settings.py`` fails the key that shows it.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr, TypeAdapter
from pydantic.fields import FieldInfo

from pipeline.errors import ConfigError
from pipeline.settings import (
    CONFIG_VARIABLE,
    DEVELOPMENT_SECTIONS,
    ENV_PREFIX,
    PROJECT_ROOT,
    Settings,
    SettingVariable,
    model_variables,
    settings_from_environment,
)
from tests.docs_pages import DOCS, shell_commands

PAGE = DOCS / "operating" / "configuration.md"

_TOML_FENCE = re.compile(r"^```toml\n(.*?)^```", re.M | re.S)
_TABLE = re.compile(r"^\[([A-Za-z0-9_.]+)\]$")
_KEY = re.compile(r"^([A-Za-z0-9_]+)\s*=\s*(.*)$")
_NOTE = re.compile(r"\s*\(default: (.+)\)$")
_EXPORT = re.compile(r"^export (BABELSTREAM_[A-Z0-9_]+)=")
# what a note says for a setting whose default is None
UNSET = "unset"


def toml_blocks(text: str) -> list[str]:
    """The bodies of a Markdown text's ```toml code blocks."""
    return list(_TOML_FENCE.findall(text))


def example_file() -> tuple[str, int]:
    """The page's one TOML block and the page's line number of its first line
    ("" when it has none or several; a test says so)."""
    text = PAGE.read_text(encoding="utf-8")
    blocks = list(_TOML_FENCE.finditer(text))
    if len(blocks) != 1:
        return "", 0
    return blocks[0].group(1), text.count("\n", 0, blocks[0].start(1)) + 1


@dataclass(frozen=True)
class KeyLine:
    """One ``key = value  # comment (default: X)`` line of the file."""

    # the dotted setting: worker.max_messages, sla.objectives.p95_ms
    setting: str
    value: Any
    # what the comment says, the note left out ("" when there is no comment)
    comment: str
    # the default the note states, as written (None: no note)
    note: str | None
    # its line of the page
    number: int


def _value_and_comment(rest: str) -> tuple[Any, str]:
    """A key line's value and its comment: the value ends at the first ``#`` before
    which the text is a whole TOML value (a ``#`` inside a string is not a comment)."""
    for hash_mark in re.finditer("#", rest):
        try:
            value = tomllib.loads(f"v = {rest[: hash_mark.start()]}")["v"]
        except tomllib.TOMLDecodeError:
            continue
        return value, rest[hash_mark.end() :].strip()
    return tomllib.loads(f"v = {rest}")["v"], ""


def key_lines(text: str, first: int = 1) -> list[KeyLine]:
    """Every key line of a TOML text whose first line is line ``first`` of its page, under
    the table it is in."""
    found = []
    table = ""
    for number, raw in enumerate(text.splitlines(), start=first):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        header = _TABLE.match(line.split("#")[0].strip())
        if header:
            table = header.group(1)
            continue
        key = _KEY.match(line)
        assert key, f"line {number} is neither a table, a key nor a comment: {raw!r}"
        value, comment = _value_and_comment(key.group(2))
        note = _NOTE.search(comment)
        if note:
            comment = comment[: note.start()]
        setting = f"{table}.{key.group(1)}" if table else key.group(1)
        found.append(KeyLine(setting, value, comment, note.group(1) if note else None, number))
    return found


def leaf_settings(document: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """The dotted names of a parsed TOML document's values, a table of an object setting
    descended into (an inline table is a value: a mapping setting's)."""
    for name, value in document.items():
        dotted = f"{prefix}{name}"
        if isinstance(value, dict) and nested_section(dotted) is not None:
            yield from leaf_settings(value, f"{dotted}.")
        else:
            yield dotted


def _all_settings() -> dict[str, SettingVariable]:
    """Every dotted setting (nested ones included) -> its variable and field."""
    found: dict[str, SettingVariable] = {}
    for section, info in Settings.model_fields.items():
        model = info.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        for each in model_variables(model, f"{ENV_PREFIX}{section}", section):
            found[each.setting] = each
    return found


SETTINGS = _all_settings()


def nested_section(dotted: str) -> type[BaseModel] | None:
    """The model of a section or an object setting (not a mapping) named ``dotted``."""
    if dotted in Settings.model_fields:
        model = Settings.model_fields[dotted].annotation
    elif dotted in SETTINGS:
        model = SETTINGS[dotted].field.annotation
    else:
        return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def field_default(field: FieldInfo) -> Any:
    return field.get_default(call_default_factory=True)


def stated_default(field: FieldInfo, note: str) -> Any:
    """What a ``(default: X)`` note says, as the field holds it."""
    if note == UNSET:
        return None
    written = tomllib.loads(f"v = {note}")["v"]
    assert field.annotation is not None
    value = TypeAdapter[Any](field.annotation).validate_python(written)
    if isinstance(value, Path) and not value.is_absolute():
        return PROJECT_ROOT / value
    return value


def loaded_value(settings: Settings, setting: str) -> Any:
    """The value of a dotted setting in loaded settings."""
    value: Any = settings
    for part in setting.split("."):
        value = getattr(value, part)
    return value


def default_problem(line: KeyLine, loaded: Any) -> str | None:
    """What is wrong with one key line against the code's defaults (``loaded``: the value
    the settings read for it), naming the key; None when it follows the convention."""
    where = f"{PAGE.name} line {line.number}: {line.setting}"
    if line.setting not in SETTINGS:
        return f"{where} is no setting"
    field = SETTINGS[line.setting].field
    default = field_default(field)
    if not line.comment:
        return f"{where} has no comment saying what it does"
    if line.note is None:
        if loaded != default:
            return (
                f"{where} = {loaded!r} differs from its default {default!r} but its comment "
                "has no '(default: ...)' note"
            )
        return None
    try:
        stated = stated_default(field, line.note)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        return f"{where}: '(default: {line.note})' is not a value of the setting ({exc})"
    if stated != default:
        return f"{where}: the comment says '(default: {line.note})', the default is {default!r}"
    if loaded == default:
        return f"{where} = {loaded!r} is the default: drop its '(default: ...)' note"
    return None


EXAMPLE, EXAMPLE_LINE = example_file()
LINES = key_lines(EXAMPLE, EXAMPLE_LINE) if EXAMPLE else []


@pytest.fixture(scope="module")
def example_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Settings read from the example alone (with the secrets the page exports)."""
    config = tmp_path_factory.mktemp("config") / "babelstream.toml"
    config.write_text(EXAMPLE, encoding="utf-8")
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in list(os.environ):
            if name.upper().startswith(ENV_PREFIX):
                monkeypatch.delenv(name)
        for secret in exported_secrets():
            monkeypatch.setenv(secret, "example-secret")
        monkeypatch.setenv(CONFIG_VARIABLE, str(config))
        try:
            settings = settings_from_environment()
        except ConfigError as exc:
            pytest.fail(f"{PAGE.name}: the example does not load: {exc}", pytrace=False)
        yield settings


def exported_secrets() -> list[str]:
    """The variables the page's commands export, but for ``BABELSTREAM_CONFIG``."""
    names = [_EXPORT.match(c.first_line) for c in shell_commands(PAGE)]
    return [m.group(1) for m in names if m and m.group(1) != CONFIG_VARIABLE]


def test_the_page_has_one_toml_block_that_parses() -> None:
    blocks = toml_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) == 1, f"{PAGE.name} has {len(blocks)} toml blocks, not one"
    assert tomllib.loads(blocks[0]), "the example is empty"
    assert len(LINES) >= 100, f"only {len(LINES)} keys in the example"


def test_the_example_loads_as_the_settings(example_settings: Settings) -> None:
    # a value the settings do not take, or an unknown key in a section, fails the fixture
    # with the file, the section and the key named
    assert (
        example_settings.kafka.replication_factor
        == tomllib.loads(EXAMPLE)["kafka"]["replication_factor"]
    )


@pytest.mark.parametrize("table", sorted(tomllib.loads(EXAMPLE)) if EXAMPLE else [])
def test_every_table_is_a_section(table: str) -> None:
    assert table in Settings.model_fields, f"[{table}] is no settings section: it is not read"
    assert isinstance(tomllib.loads(EXAMPLE)[table], dict), f"{table} is not a table"
    assert table not in DEVELOPMENT_SECTIONS, f"[{table}] is development tooling's"


def test_every_value_of_the_file_is_on_an_annotated_line() -> None:
    parsed = set(leaf_settings(tomllib.loads(EXAMPLE)))
    annotated = [line.setting for line in LINES]
    assert len(annotated) == len(set(annotated)), "a key is given twice"
    assert parsed == set(annotated), (
        f"values not on a key line of their own: {sorted(parsed ^ set(annotated))}"
    )


@pytest.mark.parametrize("line", LINES, ids=[line.setting for line in LINES])
def test_each_key_states_its_default(line: KeyLine, example_settings: Settings) -> None:
    problem = default_problem(line, loaded_value(example_settings, line.setting))
    assert problem is None, problem


def test_no_secret_is_in_the_file() -> None:
    secrets = [
        line.setting
        for line in LINES
        if line.setting in SETTINGS and SecretStr in _types(SETTINGS[line.setting].field)
    ]
    assert not secrets, f"secrets belong in the environment, not the file: {secrets}"
    for name in exported_secrets():
        variable = next((v for v in SETTINGS.values() if v.variable == name), None)
        assert variable is not None, f"{PAGE.name} exports {name}, which is no setting"
        assert SecretStr in _types(variable.field), f"{name} is exported but is no secret"


def _types(field: FieldInfo) -> tuple[Any, ...]:
    """The annotation of a field and the members of its union."""
    annotation = field.annotation
    return (annotation, *getattr(annotation, "__args__", ()))


def test_the_convention_catches_a_stale_default() -> None:
    def problem(text: str, loaded: Any) -> str | None:
        return default_problem(key_lines(text)[0], loaded)

    default = field_default(SETTINGS["worker.max_messages"].field)
    changed = default + 1
    assert problem(f"[worker]\nmax_messages = {default}  # a micro-batch\n", default) is None
    assert (
        problem(
            f"[worker]\nmax_messages = {changed}  # a micro-batch (default: {default})\n", changed
        )
        is None
    )
    stale = problem(
        f"[worker]\nmax_messages = {changed}  # a micro-batch (default: {changed + 1})\n", changed
    )
    assert stale is not None and "worker.max_messages" in stale
    unmarked = problem(f"[worker]\nmax_messages = {changed}  # a micro-batch\n", changed)
    assert unmarked is not None and "no '(default: ...)' note" in unmarked
    assert problem('[kafka]\nclient_id = "a#b"  # the # is in the string\n', "a#b") is not None
    assert key_lines('[kafka]\nclient_id = "a#b"  # the # is in the string\n')[0].value == "a#b"
    assert problem("[worker]\nmax_messages = 64\n", 64) == (
        f"{PAGE.name} line 2: worker.max_messages has no comment saying what it does"
    )
    unset = key_lines('[worker]\ninstance_id = "w-0"  # this replica (default: unset)\n')[0]
    assert default_problem(unset, "w-0") is None
