"""One ``/translate`` call: its fields, LibreTranslate's checks and messages, and its answer.

Fields come from a JSON body, or from a form body and the URL's query
(LibreTranslate reads ``request.values``: deep-translator sends its fields
as query parameters). The checks run in LibreTranslate's order with its
messages (``libretranslate/app.py``), before anything is produced; the
extensions (:data:`EXTENSIONS`) are optional fields its clients never send.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from pipeline.contract.messages import GlossaryTerm, TextFormat, TranslationResult
from pipeline.gateway.languages import Languages, display_name
from pipeline.settings import GatewaySettings

AUTO = "auto"
# LibreTranslate's formats, then this gateway's extensions
FORMATS: tuple[TextFormat, ...] = ("text", "html", "markdown", "xml")
Priority = Literal["interactive", "bulk"]
# a client's request id: it becomes part of every item's request id (<tenant>/<id>:<n>)
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,48}")
# fields of this gateway that LibreTranslate does not have
EXTENSIONS = ("glossary", "terms", "priority", "deadline_ms", "request_id")

_TERMS = TypeAdapter(list[GlossaryTerm])


class ApiError(Exception):
    """An answer other than 200: LibreTranslate's ``{"error": message}`` (plus ``extra``)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        return {"error": self.message, **self.extra}


def missing(name: str) -> ApiError:
    return ApiError(400, f"Invalid request: missing {name} parameter")


def not_supported(code: str) -> ApiError:
    return ApiError(400, f"{code} is not supported")


def over_limit(size: int, limit: int) -> ApiError:
    return ApiError(400, f"Invalid request: request ({size}) exceeds text limit ({limit})")


@dataclass(frozen=True, slots=True)
class TranslateCall:
    """A checked ``/translate`` call."""

    texts: list[str]
    as_list: bool
    # a registry tag, or AUTO
    source: str
    target: str
    text_format: TextFormat
    alternatives: int
    glossary: str | None = None
    terms: tuple[GlossaryTerm, ...] = ()
    priority: Priority = "interactive"
    deadline_ms: int | None = None
    request_id: str | None = None


def call_fingerprint(call: TranslateCall) -> str:
    """A digest of what ``call`` asks for (texts, languages, format and options), not of how
    long it may wait: the same call re-sent with its request id has the same one."""
    asked = [
        call.texts,
        call.as_list,
        call.source,
        call.target,
        call.text_format,
        call.alternatives,
        call.glossary,
        [term.model_dump() for term in call.terms],
        call.priority,
    ]
    return hashlib.sha256(json.dumps(asked, ensure_ascii=False).encode()).hexdigest()


# names of glossaries and tenants as the stores key them (no ':', '/', whitespace)
NAME = re.compile(r"[^:/\s]{1,64}")


def text_field(fields: Mapping[str, Any], name: str) -> str | None:
    """A field as a string (None when absent or empty, as LibreTranslate's ``not x``);
    a JSON number is read as its digits, any other non-string is refused."""
    value = fields.get(name)
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise ApiError(400, f"Invalid request: {name} parameter must be a string")


def parse_q(
    fields: Mapping[str, Any], is_json: bool, limits: GatewaySettings
) -> tuple[list[str], bool]:
    """``q`` as texts and whether it was a list; the list and text limits checked."""
    q = fields.get("q")
    if q is None or q == "" or q == []:
        raise missing("q")
    as_list = isinstance(q, list)
    if as_list:
        if not all(isinstance(t, str) for t in q):
            raise ApiError(400, "Invalid request: q must be a string or a list of strings")
        if len(q) > limits.batch_limit:
            raise over_limit(len(q), limits.batch_limit)
        texts = list(q)
    elif isinstance(q, str):
        # LibreTranslate counts form text with LF line ends only
        texts = [q if is_json else "\n".join(q.splitlines())]
    else:
        raise ApiError(400, "Invalid request: q must be a string or a list of strings")
    # LibreTranslate's char_limit bounds a call, the texts of a list together: a call's
    # work (and what one caller can hold up behind it) is bounded, not a text's
    chars = sum(len(text) for text in texts)
    if chars > limits.char_limit:
        raise over_limit(chars, limits.char_limit)
    return texts, as_list


def parse_translate(
    fields: Mapping[str, Any], is_json: bool, limits: GatewaySettings, languages: Languages
) -> TranslateCall:
    """Check a call's fields in LibreTranslate's order; :class:`ApiError` for the first problem."""
    q_present = fields.get("q") not in (None, "", [])
    source_code, target_code = text_field(fields, "source"), text_field(fields, "target")
    if not q_present:
        raise missing("q")
    if source_code is None:
        raise missing("source")
    if target_code is None:
        raise missing("target")
    alternatives = _int_field(fields.get("alternatives", 0), "alternatives", minimum=None)
    alternatives = max(0, alternatives)
    if alternatives > limits.alternatives_limit:
        raise ApiError(
            400,
            f"Invalid request: alternatives parameter must be <= {limits.alternatives_limit}",
        )
    texts, as_list = parse_q(fields, is_json, limits)
    if source_code.lower() == AUTO:
        source = AUTO
    else:
        resolved = languages.resolve(source_code)
        if resolved is None or not languages.targets(resolved):
            raise not_supported(source_code.lower())
        source = resolved
    target = languages.resolve(target_code)
    if target is None or not languages.sources_for(target):
        raise not_supported(target_code.lower())
    text_format = text_field(fields, "format") or "text"
    if text_format not in FORMATS:
        raise ApiError(400, f"{text_format} format is not supported")
    if source != AUTO and source != target and not languages.serves(source, target):
        raise ApiError(
            400,
            f"{display_name(target)} ({target}) is not available as a target language "
            f"from {display_name(source)} ({source})",
        )
    return TranslateCall(
        texts=texts,
        as_list=as_list,
        source=source,
        target=target,
        text_format=text_format,
        alternatives=alternatives,
        **_extensions(fields, is_json, limits),
    )


def _int_field(value: Any, name: str, *, minimum: int | None) -> int:
    if isinstance(value, bool):
        raise ApiError(400, f"Invalid request: {name} parameter is not a number")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: 1e309, Infinity
        raise ApiError(400, f"Invalid request: {name} parameter is not a number") from None
    if minimum is not None and number < minimum:
        raise ApiError(400, f"Invalid request: {name} parameter must be >= {minimum}")
    return number


def _extensions(
    fields: Mapping[str, Any], is_json: bool, limits: GatewaySettings
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    glossary = text_field(fields, "glossary")
    if glossary is not None:
        if not NAME.fullmatch(glossary):
            raise ApiError(
                400, "Invalid request: glossary must be 1-64 characters without : / or spaces"
            )
        out["glossary"] = glossary
    terms = fields.get("terms")
    if terms not in (None, "", []):
        if not is_json and isinstance(terms, str):
            try:
                terms = json.loads(terms)
            except ValueError:
                raise ApiError(400, "Invalid request: terms must be a JSON list") from None
        try:
            out["terms"] = tuple(_TERMS.validate_python(terms))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ApiError(400, f"Invalid request: terms {where}: {first['msg']}") from None
        if len(out["terms"]) > 256:
            raise ApiError(400, "Invalid request: at most 256 terms")
    priority = text_field(fields, "priority")
    if priority is not None:
        if priority not in ("interactive", "bulk"):
            raise ApiError(400, "Invalid request: priority must be interactive or bulk")
        out["priority"] = priority
    deadline = fields.get("deadline_ms")
    if deadline not in (None, ""):
        number = _int_field(deadline, "deadline_ms", minimum=100)
        if number > 3_600_000:
            raise ApiError(400, "Invalid request: deadline_ms parameter must be <= 3600000")
        out["deadline_ms"] = number
    request_id = text_field(fields, "request_id")
    if request_id is not None:
        if not REQUEST_ID.fullmatch(request_id):
            raise ApiError(400, "Invalid request: request_id must be 1-48 of A-Z a-z 0-9 . _ -")
        out["request_id"] = request_id
    return out


def failure(results: Sequence[TranslationResult]) -> ApiError | None:
    """The answer for a call one of whose results is not ``ok`` (None when all are)."""
    for result in results:
        if result.status == "ok":
            continue
        if result.status == "rejected":
            wait_ms = result.retry_after_ms
            headers = {"Retry-After": str(max(1, -(-wait_ms // 1000)))} if wait_ms else {}
            return ApiError(429, f"Slowdown: {result.error or 'quota exceeded'}", headers=headers)
        if result.status == "timeout":
            return ApiError(
                504,
                f"Translation timed out in the pipeline: {result.error or 'deadline passed'}",
                extra={"requestId": result.request_id.rsplit(":", 1)[0].split("/", 1)[-1]},
            )
        if result.status == "cancelled":
            return ApiError(409, f"Translation cancelled: {result.error or 'by request'}")
        # error results are input-caused (the contract): the request cannot succeed as sent
        return ApiError(400, f"Cannot translate text: {result.error or result.reason}")
    return None


def as_answered(translation: str, unescape_entities: bool) -> str:
    """A translation as ``/translate`` answers it: with its HTML character references
    unescaped, as LibreTranslate answers (``gateway.unescape_entities``), or as it is."""
    return html.unescape(translation) if unescape_entities else translation


def answer(
    call: TranslateCall,
    translations: Sequence[str],
    detected: Sequence[tuple[str, float]] | None,
) -> dict[str, Any]:
    """LibreTranslate's answer: ``translatedText``, ``detectedLanguage``, ``alternatives``."""
    body: dict[str, Any] = {
        "translatedText": list(translations) if call.as_list else translations[0]
    }
    if detected is not None:
        items = [{"confidence": conf, "language": lang} for lang, conf in detected]
        body["detectedLanguage"] = items if call.as_list else items[0]
    if call.alternatives > 0:
        # the pipeline makes one translation per text
        body["alternatives"] = [[] for _ in translations] if call.as_list else []
    return body
