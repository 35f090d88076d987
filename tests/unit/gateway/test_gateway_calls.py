"""The gateway's pure parts: LibreTranslate's codes and checks, answers, waiters, pending calls."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.contract.messages import TranslationRequest, TranslationResult
from pipeline.gateway.call_store import PendingCall
from pipeline.gateway.calls import ApiError, answer, failure, parse_translate
from pipeline.gateway.files import expired_jobs
from pipeline.gateway.health import health_answer
from pipeline.gateway.languages import Languages, display_name
from pipeline.gateway.link import FILE_JOB_PREFIX, Waiters
from pipeline.gateway.service import anonymous_quota
from pipeline.settings import GatewaySettings, Settings, TenantSettings

LANGUAGES = Languages.of(
    [("en", "en-XA"), ("en-XA", "en"), ("en", "pt-BR"), ("en", "zh-Hans"), ("de", "en")]
)
LIMITS = GatewaySettings(char_limit=10, batch_limit=3, alternatives_limit=2)


def parse(fields: dict[str, Any], is_json: bool = True) -> Any:
    return parse_translate(fields, is_json, LIMITS, LANGUAGES)


def error(fields: dict[str, Any], is_json: bool = True) -> tuple[int, str]:
    with pytest.raises(ApiError) as caught:
        parse(fields, is_json)
    return caught.value.status, caught.value.message


def test_codes_resolve_as_libretranslate_maps_them() -> None:
    assert LANGUAGES.resolve("EN") == "en"
    assert LANGUAGES.resolve("en-xa") == "en-XA"
    assert LANGUAGES.resolve("pb") == "pt-BR"  # LibreTranslate's aliases
    assert LANGUAGES.resolve("zh") == "zh-Hans"
    assert LANGUAGES.resolve("pt") == "pt-BR"  # the one variant served
    assert LANGUAGES.resolve("de-AT") == "de"  # a variant falls back to the language
    assert LANGUAGES.resolve("de-Latn-AT") == "de"
    assert LANGUAGES.resolve("en-XA-x-foo") is None, "a typo, not a dialect of en"
    assert LANGUAGES.resolve("de-1996") is None  # a variant subtag
    assert LANGUAGES.resolve("zt") is None
    assert LANGUAGES.resolve("fr") is None


def test_listing_and_names() -> None:
    listing = {entry["code"]: entry for entry in LANGUAGES.listing()}
    assert listing["en"] == {
        "code": "en",
        "name": "English",
        "targets": ["en-XA", "pt-BR", "zh-Hans"],
    }
    assert listing["pt-BR"]["targets"] == []
    assert display_name("en-XA") == "English (pseudo-accents)"
    assert display_name("pt-BR") == "Portuguese (BR)"


def test_checks_come_in_libretranslates_order_with_its_messages() -> None:
    assert error({}) == (400, "Invalid request: missing q parameter")
    assert error({"q": "hi"}) == (400, "Invalid request: missing source parameter")
    assert error({"q": "hi", "source": "en"}) == (400, "Invalid request: missing target parameter")
    base = {"q": "hi", "source": "en", "target": "en-XA"}
    assert error({**base, "alternatives": "x"}) == (
        400,
        "Invalid request: alternatives parameter is not a number",
    )
    assert error({**base, "alternatives": 3}) == (
        400,
        "Invalid request: alternatives parameter must be <= 2",
    )
    assert error({**base, "q": ["a"] * 4}) == (
        400,
        "Invalid request: request (4) exceeds text limit (3)",
    )
    assert error({**base, "q": "x" * 11}) == (
        400,
        "Invalid request: request (11) exceeds text limit (10)",
    )
    # the characters of a list's texts together, as LibreTranslate counts them
    assert error({**base, "q": ["x" * 6, "x" * 5]}) == (
        400,
        "Invalid request: request (11) exceeds text limit (10)",
    )
    assert error({**base, "source": "XX"}) == (400, "xx is not supported")
    assert error({**base, "target": "fr"}) == (400, "fr is not supported")
    assert error({**base, "format": "pdf"}) == (400, "pdf format is not supported")
    assert error({**base, "source": "de"}) == (
        400,
        "English (pseudo-accents) (en-XA) is not available as a target language from German (de)",
    )


def test_a_list_is_json_only_and_form_text_counts_lf_line_ends() -> None:
    call = parse({"q": "a\r\nb", "source": "en", "target": "en-XA"}, is_json=False)
    assert call.texts == ["a\nb"] and not call.as_list
    listed = parse({"q": ["a", "b"], "source": "auto", "target": "en-XA"})
    assert listed.as_list and listed.source == "auto"
    assert error({"q": ["a", 1], "source": "en", "target": "en-XA"})[0] == 400


def test_extensions() -> None:
    base = {"q": "hi", "source": "en", "target": "en-XA"}
    call = parse(
        {
            **base,
            "format": "markdown",
            "glossary": "brand",
            "terms": [{"source": "Kafka"}, {"source": "train", "target": "Zug"}],
            "priority": "bulk",
            "deadline_ms": 250,
            "request_id": "r-1",
        }
    )
    assert call.text_format == "markdown" and call.glossary == "brand"
    assert [t.target for t in call.terms] == [None, "Zug"]
    assert (call.priority, call.deadline_ms, call.request_id) == ("bulk", 250, "r-1")
    form = parse({**base, "terms": '[{"source": "Kafka"}]'}, is_json=False)
    assert form.terms[0].source == "Kafka"
    # names the glossary store and the request ids could not hold
    for bad in (
        {"glossary": "two words"},
        {"glossary": [None, None]},
        {"request_id": "a/b"},
        {"priority": "urgent"},
        {"deadline_ms": 50},
        {"terms": "not json"},
        {"terms": [{"target": "x"}]},
    ):
        assert error({**base, **bad}, is_json=not isinstance(bad.get("terms"), str))[0] == 400


def _result(status: str, **fields: Any) -> TranslationResult:
    request = TranslationRequest(
        request_id="t/r:0",
        source_lang="en",
        target_lang="en-XA",
        text="hi",
        submitted_at=1,
    )
    return TranslationResult.for_request(request, status=status, completed_at=2, **fields)  # type: ignore[arg-type]


def test_results_that_are_not_ok_become_libretranslate_errors() -> None:
    assert failure([_result("ok", translation="x")]) is None
    rejected = failure([_result("rejected", error="quota", retry_after_ms=1500)])
    assert rejected is not None and rejected.status == 429
    assert rejected.message == "Slowdown: quota" and rejected.headers == {"Retry-After": "2"}
    timed_out = failure([_result("timeout")])
    assert timed_out is not None and timed_out.status == 504
    assert timed_out.extra == {"requestId": "r"}
    bad = failure([_result("error", error="bad markup", reason="bad_markup")])
    assert bad is not None and (bad.status, bad.message) == (
        400,
        "Cannot translate text: bad markup",
    )


def test_answers_have_libretranslates_shape() -> None:
    single = parse({"q": "hi", "source": "auto", "target": "en-XA", "alternatives": 1})
    assert answer(single, ["x"], [("en", 97.5)]) == {
        "translatedText": "x",
        "detectedLanguage": {"confidence": 97.5, "language": "en"},
        "alternatives": [],
    }
    listed = parse({"q": ["a", "b"], "source": "en", "target": "en-XA"})
    assert answer(listed, ["x", "y"], None) == {"translatedText": ["x", "y"]}


def test_waiters_share_an_id_and_forget_it_when_nobody_waits() -> None:
    async def scenario() -> None:
        waiters = Waiters()
        (first,), (new,) = waiters.expect(["a"])
        (second,), (again,) = waiters.expect(["a"], durable=True)
        assert first is second and new and not again
        assert waiters.resolve(
            _result("ok", translation="x").model_copy(update={"request_id": "a"})
        )
        assert first.result().translation == "x"
        waiters.release(["a"])
        assert len(waiters) == 1
        waiters.release(["a"])
        assert len(waiters) == 0
        # nobody waits: the result is to be stored
        assert waiters.resolve(_result("ok").model_copy(update={"request_id": "a"}))
        (plain,), _ = waiters.expect(["b"])
        assert not waiters.resolve(_result("ok").model_copy(update={"request_id": "b"}))
        assert plain.done()

    asyncio.run(scenario())


def test_a_pending_call_round_trips() -> None:
    call = PendingCall(
        ["t/r:0", None], [None, "same"], True, [("en", 99.0), ("en-XA", 100.0)], 0, "html"
    )
    assert PendingCall.from_json(call.to_json()) == call


def test_the_limits_must_fit_the_wait() -> None:
    assert GatewaySettings().work_ms(5000) == 5000  # the defaults: 5,000 characters in 5 s
    with pytest.raises(ValueError, match=r"char_limit \(5000\) at min_chars_per_s \(100\) needs"):
        GatewaySettings(min_chars_per_s=100)  # 50 s of work against a 30 s wait
    GatewaySettings(min_chars_per_s=100, wait_timeout_ms=50_000)


def test_anonymous_callers_get_a_quota_unless_one_is_set_for_them() -> None:
    settings = Settings()
    assert anonymous_quota(settings).quota("anonymous") == 100_000
    assert anonymous_quota(settings).quota("someone") is None  # keyed tenants: as configured
    named = Settings(tenants=TenantSettings(quota_chars={"anonymous": 7}))
    assert anonymous_quota(named).quota("anonymous") == 7
    unlimited = Settings(gateway=GatewaySettings(anonymous_quota_chars=None))
    assert anonymous_quota(unlimited).quota("anonymous") is None


def test_health_is_ok_while_the_loop_beats_and_stalled_after() -> None:
    assert health_answer(last_beat=100.0, now=109.0, stall_s=10) == (200, {"status": "ok"})
    assert health_answer(last_beat=100.0, now=112.34, stall_s=10) == (
        503,
        {"status": "stalled", "loop_stalled_s": 12.3},
    )


def test_file_jobs_expire_by_their_last_change(tmp_path: Path) -> None:
    old, fresh = (
        tmp_path / f"{FILE_JOB_PREFIX}{'a' * 32}",
        tmp_path / f"{FILE_JOB_PREFIX}{'b' * 32}",
    )
    (old / "out").mkdir(parents=True)
    (fresh / "out").mkdir(parents=True)
    (tmp_path / "not-a-job").mkdir()
    now = time.time()
    for path in (old, old / "out", tmp_path / "not-a-job"):
        os.utime(path, (now - 100, now - 100))
    for path in (fresh, fresh / "out"):
        os.utime(path, (now - 100, now - 100))
    (fresh / "out" / "late.txt").write_text("written just now")  # still changing: kept
    assert expired_jobs(tmp_path, ttl_s=50, now=now) == [old]
    assert expired_jobs(tmp_path / "missing", ttl_s=50, now=now) == []
