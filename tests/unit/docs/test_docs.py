"""The documentation matches the code.

The README and the site's pages name only settings that exist and show only
commands that parse; the generated reference lists every setting, metric,
command, message and alert rule; the runbook has an entry for every alert;
the site builds strictly (no broken link or anchor). The settings that
docker-compose.yml passes to the containers are checked the same way.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from docsgen import reference
from pipeline.cli.main import main
from pipeline.errors import ConfigError
from pipeline.observability.metrics import GATEWAY_METRIC_NAMES, METRIC_NAMES
from pipeline.settings import CONFIG_VARIABLE, PROJECT_ROOT, check_environment, setting_variables
from tests.docs_pages import DOCS, README, babelstream_invocations, current_pages

COMPOSE = (PROJECT_ROOT / "docker-compose.yml").read_text(encoding="utf-8")

# a name, not a pattern such as BABELSTREAM_<SECTION>__<FIELD> or BABELSTREAM_STACK__*_PORT
_VARIABLE = re.compile(r"BABELSTREAM_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_<*])")


def _texts() -> list[str]:
    return [page.read_text(encoding="utf-8") for page in current_pages()]


def documented_variables() -> list[str]:
    found = {v for text in [*_texts(), COMPOSE] for v in _VARIABLE.findall(text)}
    return sorted(found)


def documented_commands() -> list[list[str]]:
    commands = {tuple(c) for text in _texts() for c in babelstream_invocations(text)}
    return [list(c) for c in sorted(commands)]


def _resolve(args: list[str]) -> tuple[list[str], click.Command, list[str]]:
    """(sub-command path, its command, the rest of the arguments)."""
    command: click.Command = main
    path: list[str] = []
    rest = list(args)
    ctx = click.Context(main)
    while isinstance(command, click.Group) and rest:
        if rest[0].startswith("-"):  # a root option such as -v
            rest.pop(0)
            continue
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            break
        path.append(rest.pop(0))
        command = sub
    return path, command, rest


def test_the_docs_show_commands_and_settings() -> None:
    assert len(documented_commands()) >= 60
    assert len(documented_variables()) >= 60


# shown on purpose, as the mistake Troubleshooting explains
MISSPELT = {"BABELSTREAM_WORKER__WEBPORT"}


@pytest.mark.parametrize("name", sorted(set(documented_variables()) - MISSPELT))
def test_every_documented_setting_exists(name: str) -> None:
    assert name in setting_variables() or name == CONFIG_VARIABLE, f"{name} is no setting"


@pytest.mark.parametrize("name", sorted(MISSPELT))
def test_the_misspelt_example_is_refused_as_the_docs_say(name: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown setting {name}; did you mean"):
        check_environment({name: "1"})


@pytest.mark.parametrize("args", documented_commands(), ids=" ".join)
def test_every_documented_command_parses(args: list[str]) -> None:
    path, command, rest = _resolve(args)
    assert path, f"{args}: no such command"
    assert not isinstance(command, click.Group) or command.invoke_without_command, (
        f"{args}: {path} needs a sub-command"
    )
    options = {
        opt
        for p in command.params
        for opt in (*p.opts, *p.secondary_opts)
        if isinstance(p, click.Option)
    }
    shown = {t.strip("[]").split("=")[0] for t in rest if t.strip("[").startswith("-") and t != "-"}
    assert shown <= options, f"{' '.join(args)}: no such option {sorted(shown - options)}"
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output


# --- the README ---------------------------------------------------------------------------


def test_the_readme_is_short_and_shows_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert "make demo" in text and "make test" in text


def test_every_link_of_the_readme_leads_to_a_file() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local, "the README links into the docs"
    missing = [link for link in local if not (PROJECT_ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"


# --- the generated reference --------------------------------------------------------------


def test_the_settings_page_lists_every_setting() -> None:
    page = reference.settings_page()
    missing = [v for v in setting_variables() if f"`{v}`" not in page]
    assert not missing, f"settings missing from the reference: {missing}"


def test_the_settings_page_gives_each_setting_its_comment_and_default() -> None:
    rows = reference.settings_page().splitlines()

    def row(variable: str) -> str:
        return next(line for line in rows if f"`{variable}`" in line)

    timeout = row("BABELSTREAM_WORKER__SESSION_TIMEOUT_S")
    assert "`10.0`" in timeout and "the failover time after a crash" in timeout
    assert "(≥ 6.0, ≤ 300.0)" in timeout
    assert "| secret | null |" in row("BABELSTREAM_KAFKA__SASL_PASSWORD").replace("\\", "")


def test_the_settings_page_gives_nested_settings_their_variables() -> None:
    rows = reference.settings_page().splitlines()
    row = next(line for line in rows if "`BABELSTREAM_SLA__OBJECTIVES__P95_MS`" in line)
    assert "`1000.0`" in row and "P95 latency" in row
    assert any("`BABELSTREAM_SLA__PAIR_OBJECTIVES__<KEY>__P99_MS`" in line for line in rows)


def test_a_setting_without_a_comment_fails_the_build() -> None:
    class Undocumented(BaseModel):
        # documented
        documented: int = 1
        bare: str = "x"

    with pytest.raises(ValueError, match=r"setting example\.bare has no comment"):
        reference.settings_section("example", Undocumented)


def test_field_comments_are_read_from_the_source_above_each_field(tmp_path: Path) -> None:
    source = textwrap.dedent(
        """
        class Example(BaseModel):
            # first line of the comment
            # second line
            documented: int = 1
            bare: str = "x"

            # after a blank line, for this one only
            later: float = 2.0
        """
    )
    module = tmp_path / "example_model.py"
    module.write_text("from pydantic import BaseModel\n" + source, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        import example_model
    finally:
        sys.path.remove(str(tmp_path))
    model: type[BaseModel] = example_model.Example
    assert reference.field_comments(model) == {
        "documented": "first line of the comment second line",
        "later": "after a blank line, for this one only",
    }


def test_the_metrics_page_lists_every_metric() -> None:
    from pipeline.observability import metrics

    page = reference.metrics_page()
    declared = [reference.exposition_name(m) for m in reference.declared_metrics(metrics)]
    listed = [*METRIC_NAMES, *GATEWAY_METRIC_NAMES]
    assert sorted(declared) == sorted(listed), "a metric is declared but not listed"
    missing = [name for name in listed if f"`{name}`" not in page]
    assert not missing, f"metrics missing from the reference: {missing}"


def test_the_cli_page_has_a_section_for_every_command() -> None:
    page = reference.cli_page(main)
    ctx = click.Context(main, info_name="babelstream")
    paths = [c.command_path for _, c in reference.iter_commands(main, ctx)]
    assert len(paths) >= 50
    headings = set(re.findall(r"^#+ (babelstream.*)$", page, re.M))
    assert set(paths) <= headings, sorted(set(paths) - headings)


def test_options_without_a_default_show_none_and_no_click_marker() -> None:
    """click 8.3 gives an option without a default its UNSET sentinel, which the page
    once printed as ``Sentinel.UNSET`` in 87 cells; a leaked one fails the build."""
    page = reference.cli_page(main)
    assert "Sentinel" not in page and "UNSET" not in page
    # `translate --src` is required and has no default
    section = page.split("## babelstream translate\n", 1)[1].split("\n## ", 1)[0]
    src_row = next(line for line in section.splitlines() if line.startswith("| `--src`"))
    assert src_row.split("|")[3].strip() == "—", src_row

    @click.command()
    @click.option("--leaky", default=click.core.UNSET, type=click.Choice([reference.__name__]))
    def leaky(leaky: str) -> None: ...

    leaky.params[0].default = "Sentinel.UNSET"  # what a new marker of click's would render
    with pytest.raises(ValueError, match="sentinel"):
        reference.cli_page(leaky)


def test_the_contract_page_has_a_section_for_every_schema() -> None:
    import json

    page = reference.contract_page()
    for path in sorted(reference.SCHEMAS_DIR.glob("*.schema.json")):
        title = json.loads(path.read_text(encoding="utf-8"))["title"]
        assert f"## {title}\n" in page, title
        assert f"`schemas/{path.name}`" in page


def test_the_alerts_page_links_every_alert_to_its_runbook_entry() -> None:
    page = reference.alerts_page()
    names = reference.alert_names()
    assert len(names) >= 10
    for name in names:
        assert f"### {name}\n" in page
        assert f"(../runbook.md#{reference.runbook_anchor(name)})" in page


def test_the_runbook_has_an_entry_for_every_alert_rule() -> None:
    runbook = (DOCS / "runbook.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^#+ (\S+)\s*$", runbook, re.M))
    missing = [name for name in reference.alert_names() if name not in headings]
    assert not missing, f"alerts without a runbook entry: {missing}"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """Every page, generated ones included, builds; a broken link or anchor fails."""
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for page in reference.PAGES:
        html = (site / page.removesuffix(".md") / "index.html").read_text(encoding="utf-8")
        assert "<table>" in html or "<h2" in html, page


# --- wording ------------------------------------------------------------------------------

# how the work was organised, not what the software does
_WORK_WORDS = re.compile(
    r"\b(this|last|previous|earlier|every|each) sessions?\b|\bsessions? before\b"
    r"|\bwe tried\b|\bissue #?\d+|(?<![\w/&])#\d{1,3}\b",
    re.I,
)


@pytest.mark.parametrize(
    "path",
    [README, *sorted(DOCS.rglob("*.md"))],
    ids=lambda p: str(p.relative_to(PROJECT_ROOT)),
)
def test_the_docs_speak_of_the_software_and_its_releases(path: Path) -> None:
    found = _WORK_WORDS.findall(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name}: {found}"
