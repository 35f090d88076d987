"""How a page's command samples are read and compared with what the commands print."""

from __future__ import annotations

from pathlib import Path

from pipeline.settings import PROJECT_ROOT
from tests.docs_pages import command_samples, masked, output_differs


def test_ids_figures_and_the_project_folder_are_masked() -> None:
    printed = (
        f"[error] no model in {PROJECT_ROOT}/models/registry.toml\n"
        "ba12e4acd7124fa78bad0024fe2d1c3c\n"
        'latency: P50 135 ms  P95 212.5 ms {"cache":"l1","worker":"host-42"}   \n'
    )
    assert masked(printed) == (
        "[error] no model in /path/to/babelstream/models/registry.toml\n"
        "<id>\n"
        'latency: PN N ms PN N ms {"cache":"<cache>","worker":"<worker>"}'
    )
    # padding to a figure's width is one space: 127.0.0.1:1 lines up as 127.0.0.1:9092 does
    assert masked("kafka     127.0.0.1:1            DOWN") == masked(
        "kafka     127.0.0.1:9092         DOWN"
    )
    # a word of hex letters only is a word, not an id
    assert masked("deadbeefcafe feed") == "deadbeefcafe feed"


def test_a_changed_line_differs_and_an_ellipsis_stands_for_any_lines() -> None:
    printed = "kafka healthy pid 1\nredis healthy pid 2\nworker running\nsla idle\n"
    assert output_differs("kafka healthy pid 7\n...\nsla idle\n", printed) is None
    assert output_differs("kafka healthy pid 7\n...\n", printed) is None
    assert output_differs("kafka healthy pid 7\nredis healthy pid 9\n...\n", printed) is None
    stale = output_differs("kafka healthy pid 7\n...\nsla running\n", printed)
    assert stale is not None and "'sla running'" in stale
    assert output_differs("redis healthy pid 2\nkafka healthy pid 1\n...\n", printed)
    assert output_differs("kafka healthy pid 1\n", printed), "lines left over differ"


def test_samples_are_shell_blocks_with_their_output_and_transcripts(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\nbabelstream unshown\n```\n\nprose\n\n```\nan output\n```\n\n"
        "```sh\nbabelstream one\n```\n\n```text\nfirst\n```\n\n"
        "```sh\nbabelstream unshown\n```\n\n"
        "```\n$ babelstream two --x\nsecond\n```\n",
        encoding="utf-8",
    )
    samples = command_samples(page)
    assert [(s.commands, s.expected) for s in samples] == [
        ("babelstream one\n", "first\n"),
        ("babelstream two --x\n", "second\n"),
    ]
