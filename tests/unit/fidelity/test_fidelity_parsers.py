"""Format parsers of the fidelity layer: what becomes a segment, what is kept byte for byte."""

from __future__ import annotations

import pytest

from pipeline.fidelity.document import Run, runs, source_text
from pipeline.fidelity.icu import parse_icu
from pipeline.fidelity.markdown import parse_markdown
from pipeline.fidelity.markup import BadMarkup, parse_markup
from pipeline.fidelity.placeholders import PlaceholderFinder
from pipeline.fidelity.prepare import FidelityConfig, prepare


def segments(doc) -> list[str]:
    return [r.engine_text() for r in runs(doc) if r.has_text()]


# -- placeholders -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "protected"),
    [
        ("Hello {name}!", ["{name}"]),
        ("{0} of {1}", ["{0}", "{1}"]),
        ("Total: {amount, number, currency}", ["{amount, number, currency}"]),
        ("Value {0:.2f} here", ["{0:.2f}"]),
        ("Hi %s, you have %d items", ["%s", "%d"]),
        ("Move %1$s to %2$s", ["%1$s", "%2$s"]),
        ("Width %-5.2f and 100%% done", ["%-5.2f", "%%"]),
        ("Dear %(name)s, %(count)d left", ["%(name)s", "%(count)d"]),
        (
            "Hello {{user}} and {{{raw}}} and {{- escaped}}",
            ["{{user}}", "{{{raw}}}", "{{- escaped}}"],
        ),
        ("See $t(common.more) now", ["$t(common.more)"]),
        ("Click <0>here</0> or <1/>", ["<0>", "</0>", "<1/>"]),
        (
            "Visit https://example.com/a?b=1. Or www.example.org!",
            ["https://example.com/a?b=1", "www.example.org"],
        ),
        ("Mail bob.smith@example.co.uk today", ["bob.smith@example.co.uk"]),
        ("Run `ls -la` and ``a ` b``", ["`ls -la`", "``a ` b``"]),
        ("Brackets ⟦ stay ⟧", ["⟦", "⟧"]),
        ("50% off, 100 percent sure", []),
    ],
)
def test_every_placeholder_form_is_found(text, protected):
    found = [text[m.start : m.end] for m in PlaceholderFinder().find_spans(text)]
    assert found == protected


def test_extra_patterns_from_settings_are_protected_too():
    finder = PlaceholderFinder([r"\bSKU-\d+\b"])
    text = "Order SKU-1234 for {name}"
    assert [text[m.start : m.end] for m in finder.find_spans(text)] == ["SKU-1234", "{name}"]
    with pytest.raises(ValueError, match="placeholder pattern"):
        PlaceholderFinder(["("])


def test_prepared_plain_text_masks_placeholders_as_tokens():
    prepared = prepare("Hello {name}, see https://x.io now", "text", FidelityConfig())
    assert prepared.segments() == ["Hello ⟦0⟧, see ⟦1⟧ now"]


# -- ICU ------------------------------------------------------------------------------------------


def test_icu_plural_and_select_keep_syntax_and_translate_messages():
    text = (
        "You have {count, plural, offset:1 =0 {no messages} one {# message from {name}} "
        "other {# messages}}, {gender, select, male {he} female {she} other {they}} said."
    )
    doc = parse_icu(text)
    assert doc is not None
    assert source_text(doc) == text
    assert segments(doc) == [
        "You have ⟦0⟧, ⟦1⟧ said.",
        "no messages",
        "⟦0⟧ message from ⟦1⟧",
        "⟦0⟧ messages",
        "he",
        "she",
        "they",
    ]


def test_icu_without_plural_or_select_is_plain_text():
    assert parse_icu("Hello {name}") is None
    assert parse_icu("unbalanced {braces") is None


# -- HTML -----------------------------------------------------------------------------------------

PAGE = """<!DOCTYPE html>
<html><head><title>Demo page</title><style>p { color: red }</style></head>
<body>
<!-- a comment -->
<h1 title="Main title">Hello <b>big <i>world</i></b>!</h1>
<p>Tom &amp; Jerry &mdash; <a href="/x" class="btn">click here</a> \
<img src="a.png" alt="A photo"> now.</p>
<p translate="no">Keep this</p>
<script>var x = "<b>not text</b>";</script>
<p>Run <code>ls -la</code> now<br>next line</p>
<pre>  keep   this  </pre>
<input placeholder='Your name' value="not translated">
</body></html>"""


def test_html_segments_sentences_with_inline_tags_and_attributes():
    doc = parse_markup(PAGE, "html")
    assert source_text(doc) == PAGE
    assert segments(doc) == [
        "Demo page",
        "Main title",
        "Hello ⟦0⟧big ⟦1⟧world⟦2⟧⟦3⟧!",
        "Tom ⟦0⟧ Jerry ⟦1⟧ ⟦2⟧click here⟦3⟧ ⟦4⟧ now.",
        "A photo",
        "Run ⟦0⟧ now⟦1⟧next line",
        "Your name",
    ]


@pytest.mark.parametrize(
    "bad",
    [
        "<p>Hello <b>world</p></b>",
        "<b>unclosed",
        "<div><span>crossed</div></span>",
        "<p>text</i></p>",
    ],
)
def test_malformed_html_is_bad_markup(bad):
    with pytest.raises(BadMarkup):
        parse_markup(bad, "html")


def test_xml_mixed_content_is_inline_and_translate_no_is_kept():
    xml = (
        '<?xml version="1.0"?>\n<doc><title>Hello</title>'
        "<para>Some <em>bold</em> text &amp; more.</para>"
        '<note translate="no">x <![CDATA[raw <b>]]></note></doc>'
    )
    doc = parse_markup(xml, "xml")
    assert source_text(doc) == xml
    assert segments(doc) == ["Hello", "Some ⟦0⟧bold⟦1⟧ text ⟦2⟧ more."]
    with pytest.raises(BadMarkup):
        parse_markup("<doc><a></doc>", "xml")


# -- Markdown -------------------------------------------------------------------------------------

MARKDOWN = """# Hello *world*

Some **bold** text with `code` and a [link](http://x.com "title") and ![alt text](i.png).
Second line \\* escaped &amp; entity{TWO_SPACES}
hard break.

> quoted
> more quoted

- item one
- item _two_ <https://auto.link>

```python
print("never translated")
```

    indented code

| a | b |
|---|---|
| cell one | cell two |
""".replace("{TWO_SPACES}", "  ")  # a hard line break


def test_markdown_segments_keep_syntax_outside_text():
    doc = parse_markdown(MARKDOWN)
    assert source_text(doc) == MARKDOWN
    assert segments(doc) == [
        "Hello ⟦0⟧world⟦1⟧",
        "Some ⟦0⟧bold⟦1⟧ text with ⟦2⟧ and a ⟦3⟧link⟦4⟧ and ⟦5⟧alt text⟦6⟧.\n"
        "Second line ⟦8⟧ escaped ⟦9⟧ entity\nhard break.",
        "quoted\nmore quoted",
        "item one",
        "item ⟦0⟧two⟦1⟧ ⟦2⟧",
        "a",
        "b",
        "cell one",
        "cell two",
    ]


def test_runs_without_letters_or_digits_are_not_segments():
    doc = parse_markup("<p> <b>42</b> </p><p>- <img alt='Logo'> </p>", "html")
    assert segments(doc) == [" ⟦0⟧42⟦1⟧ ", "Logo"]
    assert not any(isinstance(n, Run) and not n.has_text() for n in doc)
