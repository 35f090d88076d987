"""The gateway's HTTP API: LibreTranslate's routes, answers and errors, plus named extensions.

FastAPI serves the OpenAPI spec (``/spec``, generated from the pydantic
models below) and Swagger UI (``/docs``, its files from the
``swagger-ui-bundle-v2`` package: no CDN). ``/translate`` and ``/detect``
read JSON bodies, form bodies and query parameters alike, as LibreTranslate
does, so they parse their fields themselves; the spec documents both body
types. Every error is LibreTranslate's ``{"error": message}``, and every
answer carries its CORS headers. Fields and routes that LibreTranslate does
not have are marked ``x-babelstream-extension`` in the spec.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Mount, Route

from pipeline.contract.messages import Headers
from pipeline.gateway.calls import (
    EXTENSIONS,
    FORMATS,
    ApiError,
    missing,
    over_limit,
    parse_q,
    parse_translate,
    text_field,
)
from pipeline.gateway.files import FileJobs
from pipeline.gateway.health import LoopHealth
from pipeline.gateway.languages import display_name
from pipeline.gateway.service import TRACE_HEADERS, Gateway
from pipeline.observability import metrics
from pipeline.settings import GatewaySettings, Settings

log = logging.getLogger(__name__)

EXTENSION: dict[str, Any] = {"x-babelstream-extension": True}
VERSION = "1.9.6-babelstream"  # LibreTranslate's API version it follows

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# LibreTranslate's CORS headers (its after_request), on every answer
CORS_HEADERS = [
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-headers", b"Authorization, Content-Type"),
    (b"access-control-expose-headers", b"Authorization"),
    (b"access-control-allow-methods", b"GET, POST"),
    (b"access-control-allow-credentials", b"true"),
    (b"access-control-max-age", str(60 * 60 * 24 * 20).encode()),
]


class Cors:
    """ASGI middleware: CORS headers on every answer; ``OPTIONS`` (preflight) answered 200."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            headers = [*CORS_HEADERS, (b"allow", b"GET, POST, OPTIONS"), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return

        started = False

        async def with_cors(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), *CORS_HEADERS]
            await send(message)

        try:
            await self._app(scope, receive, with_cors)
        except Exception:
            # a defect, not the caller's input: logged with its traceback, answered as
            # every other error (JSON, CORS), and the connection stays usable
            log.exception("%s %s failed", scope["method"], scope["path"])
            if started:
                raise
            body = json.dumps({"error": "Internal error: see the gateway's log"}).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *CORS_HEADERS,
            ]
            await send({"type": "http.response.start", "status": 500, "headers": headers})
            await send({"type": "http.response.body", "body": body})


# -- the spec's models ---------------------------------------------------------------------


def _ext(description: str, **kwargs: Any) -> Any:
    return Field(
        None, description=f"Extension: {description}", json_schema_extra=EXTENSION, **kwargs
    )


class Term(BaseModel):
    """An inline glossary term: ``source`` always translated as ``target`` (none: kept)."""

    model_config = ConfigDict(extra="forbid")
    source: Annotated[str, Field(min_length=1, max_length=256)]
    target: Annotated[str, Field(min_length=1, max_length=256)] | None = None


class TranslateBody(BaseModel):
    """``POST /translate`` (JSON). Form bodies carry the same fields (``q`` one string)."""

    q: str | list[str] = Field(description="Text(s) to translate")
    source: str = Field(description='Source language code or "auto" for auto detection')
    target: str = Field(description="Target language code")
    format: Literal["text", "html", "markdown", "xml"] = Field(
        "text",
        description="Format of source text: text, html; markdown and xml are extensions",
    )
    alternatives: int = Field(0, description="Preferred number of alternative translations")
    api_key: str | None = Field(None, description="API key")
    glossary: str | None = _ext("a stored glossary of the key's tenant", max_length=64)
    terms: list[Term] | None = _ext("inline glossary terms for this call", max_length=256)
    priority: Literal["interactive", "bulk"] | None = _ext(
        "interactive (default) or bulk: bulk is served after interactive work"
    )
    deadline_ms: int | None = _ext(
        "how long to wait before answering 504 with the request id", ge=100, le=3_600_000
    )
    request_id: str | None = _ext(
        "idempotency key: a retry with the same id gets the same results",
        pattern=r"^[A-Za-z0-9._-]{1,48}$",
    )


class TranslateForm(BaseModel):
    """``POST /translate`` as a form (LibreTranslate's ``formData``)."""

    q: str
    source: str
    target: str
    format: Literal["text", "html", "markdown", "xml"] = "text"
    alternatives: int = 0
    api_key: str | None = None
    glossary: str | None = _ext("a stored glossary of the key's tenant", max_length=64)
    terms: str | None = _ext("inline glossary terms, as a JSON list")
    priority: Literal["interactive", "bulk"] | None = _ext("interactive (default) or bulk")
    deadline_ms: int | None = _ext("milliseconds to wait before a 504", ge=100, le=3_600_000)
    request_id: str | None = _ext("idempotency key", pattern=r"^[A-Za-z0-9._-]{1,48}$")


class DetectedLanguage(BaseModel):
    confidence: float = Field(ge=0, le=100, description="Confidence value (0-100)")
    language: str = Field(description="Language code")


class TranslateAnswer(BaseModel):
    translatedText: str | list[str] = Field(description="Translated text(s)")
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = None
    alternatives: list[str] | list[list[str]] | None = None


# what a call has of its translations so far: null where a text is not (yet) translated
PartialTexts = str | None | list[str | None]


class ErrorAnswer(BaseModel):
    error: str
    requestId: str | None = _ext("the call's request id (504)")
    resultUrl: str | None = _ext("where the result can be fetched (504)")
    translatedText: PartialTexts = _ext(
        "GET /translate/result: the texts that were translated (null: not)"
    )


class PendingAnswer(BaseModel):
    requestId: str
    status: Literal["pending"]
    pending: int
    translatedText: PartialTexts = Field(description="The texts translated so far (null: not yet)")


class DetectBody(BaseModel):
    q: str | list[str] = Field(description="Text to detect (a list: one answer per text)")
    api_key: str | None = None


class Language(BaseModel):
    code: str
    name: str
    targets: list[str]


class FileAnswer(BaseModel):
    translatedFileUrl: str


class FileJobAnswer(BaseModel):
    jobId: str
    status: Literal["running"]
    statusUrl: str | None = _ext("where to poll the job (POST /translate_file's 202)")


class FileForm(BaseModel):
    """``POST /translate_file`` (multipart)."""

    file: bytes = Field(description="File to translate (.txt, .html, .htm, .md, .srt)")
    source: str = Field(description='Source language code or "auto"')
    target: str = Field(description="Target language code")
    api_key: str | None = None


class SuggestBody(BaseModel):
    q: str
    s: str
    source: str
    target: str


# LibreTranslate's words when files_translation is off
FILES_DISABLED = "Files translation are disabled on this server."


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    described = {
        400: "Invalid request",
        403: "Invalid API key, or a disabled feature",
        404: "Unknown request id (or file job)",
        409: "Cancelled",
        413: "Body too large",
        422: "The request id was used for another call",
        429: "Slow down: the tenant's quota, or its file jobs at once, used up (Retry-After)",
        500: "A defect of the gateway (a file job that failed on one)",
        503: "Kafka (or Redis) cannot take the call now (Retry-After)",
        504: "Not translated within the deadline: fetch the result by request id later",
    }
    return {code: {"model": ErrorAnswer, "description": described[code]} for code in codes}


def _bodies(json_model: type[BaseModel], form_model: type[BaseModel] | None) -> dict[str, Any]:
    content: dict[str, Any] = {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{json_model.__name__}"}}
    }
    if form_model is not None:
        ref = {"$ref": f"#/components/schemas/{form_model.__name__}"}
        content["application/x-www-form-urlencoded"] = {"schema": ref}
        content["multipart/form-data"] = {"schema": ref}
    return {"requestBody": {"required": True, "content": content}}


# -- reading calls -------------------------------------------------------------------------


def _is_json(request: Request) -> bool:
    """LibreTranslate's ``request.is_json``: application/json or ``+json``."""
    mime = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return mime == "application/json" or (
        mime.startswith("application/") and mime.endswith("+json")
    )


async def read_fields(request: Request, max_bytes: int) -> tuple[dict[str, Any], bool]:
    """A call's fields (JSON body, or query then form, as ``request.values``); size checked."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise ApiError(413, f"Invalid request: body exceeds {max_bytes} bytes")
    if _is_json(request):
        body = await _bounded_body(request, max_bytes)
        try:
            fields = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
            raise ApiError(400, "Invalid JSON format") from None
        if not isinstance(fields, dict):
            raise ApiError(400, "Invalid JSON format")
        if b"\\u" in body and not _valid_unicode(fields):
            raise ApiError(
                400, "Invalid request: the body holds a lone surrogate (\\ud800-\\udfff)"
            )
        return fields, True
    query: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        query.setdefault(key, value)
    form: dict[str, Any] = {}
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type == "application/x-www-form-urlencoded":
        form = _url_form(await _bounded_body(request, max_bytes))
    elif media_type == "multipart/form-data":
        if length is None:  # the multipart parser would read a chunked body unbounded
            raise ApiError(411, "Invalid request: a multipart body needs a Content-Length")
        for key, item in (await request.form()).multi_items():
            if isinstance(item, str):
                form.setdefault(key, item)
    return {**form, **query}, False  # the query's value first, as request.values


async def _bounded_body(request: Request, max_bytes: int) -> bytes:
    """The whole body, read as it arrives (chunked or not); 413 past ``max_bytes``."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise ApiError(413, f"Invalid request: body exceeds {max_bytes} bytes")
    return bytes(body)


def _url_form(body: bytes) -> dict[str, Any]:
    """A URL-encoded form's first value of each field, its bytes and escapes read as UTF-8
    (Starlette reads raw bytes as Latin-1, so raw ``ü`` arrived as ``Ã¼``)."""
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise ApiError(400, "Invalid request: the form is not UTF-8") from None
    form: dict[str, Any] = {}
    for key, value in pairs:
        form.setdefault(key, value)
    return form


def _valid_unicode(fields: dict[str, Any]) -> bool:
    """Whether every string of a parsed body is valid Unicode: JSON's ``\\ud800`` escapes
    decode to lone surrogates, which no UTF-8 record or answer can carry."""
    try:
        json.dumps(fields, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Observed:
    """ASGI middleware: each HTTP call counted and timed by route and status
    (``babelstream_gateway_*``, served at ``GET /metrics``)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the caller gets when the app ends before answering

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        metrics.GATEWAY_CALLS_IN_FLIGHT.inc()
        try:
            await self._app(scope, receive, observed)
        finally:
            metrics.GATEWAY_CALLS_IN_FLIGHT.dec()
            # the route's template, never the path itself: ids in paths are unbounded labels
            route = scope.get("route")
            name = route.path if isinstance(route, Route | Mount) else "unmatched"
            metrics.GATEWAY_CALLS.labels(name, str(status)).inc()
            metrics.GATEWAY_CALL_SECONDS.labels(name).observe(time.perf_counter() - started)


def _trace_headers(request: Request) -> Headers:
    return [
        (name, request.headers[name].encode()) for name in TRACE_HEADERS if name in request.headers
    ]


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def create_app(settings: Settings, process: int = 0) -> FastAPI:
    """The gateway application of one process."""
    gateway = Gateway(settings, process)
    files = FileJobs(settings, gateway)
    limits = settings.gateway

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        cleaner = asyncio.create_task(files.keep_clean()) if limits.files_translation else None
        health = beat = None
        if limits.health_port is not None:
            health = LoopHealth(limits.host, limits.health_port + process, limits.health_stall_s)
            health.start()
            beat = asyncio.create_task(health.beat())
        try:
            yield
        finally:
            if cleaner is not None:
                cleaner.cancel()
            if health is not None and beat is not None:
                beat.cancel()
                health.stop()
            await gateway.stop()

    app = FastAPI(
        title="LibreTranslate (Babel Stream gateway)",
        description=(
            "LibreTranslate's API onto Babel Stream's Kafka path: cross-request batching, "
            "caches, tenant quotas and SLA figures. Fields and routes marked "
            "x-babelstream-extension are not LibreTranslate's."
        ),
        version=VERSION,
        license_info={"name": "Apache-2.0"},
        openapi_url="/spec",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.gateway = gateway

    _add_error_handlers(app, gateway)
    _add_text_routes(app, gateway, limits)
    _add_file_routes(app, gateway, files, limits)
    _add_misc_routes(app, gateway, files, limits)
    _add_docs(app)
    _with_schemas(
        app, [TranslateBody, TranslateForm, DetectBody, SuggestBody, FileForm], _examples(gateway)
    )
    app.add_middleware(Cors)
    app.add_middleware(Observed)  # outermost: it also sees what Cors answered
    return app


def _add_error_handlers(app: FastAPI, gateway: Gateway) -> None:
    """Every error as LibreTranslate's ``{"error": ...}`` body, counted by status."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        gateway.stats.count(exc.status)
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "request"
        return JSONResponse({"error": f"Invalid request: {where}: {first['msg']}"}, status_code=400)


async def _caller(
    gateway: Gateway, request: Request, fields: dict[str, Any]
) -> tuple[str, GatewaySettings]:
    """The tenant of the call's ``api_key`` (refused when a key is required and unknown)
    and the limits the call is held to, once it is counted against its caller's calls
    per minute and per day (429 beyond)."""
    # a number is a key too (LibreTranslate reads it as its digits): unknown, so 403
    key = await gateway.key(text_field(fields, "api_key"))
    # the client's address, or the one a trusted proxy names (gateway.forwarded_allow_ips)
    await gateway.admit(key, request.client.host if request.client else "unknown")
    tenant = key.tenant if key is not None else gateway.settings.gateway.anonymous_tenant
    return tenant, gateway.limits_for(key)


def _add_text_routes(app: FastAPI, gateway: Gateway, limits: GatewaySettings) -> None:
    """Translate, fetch a result later, list the languages, detect the language."""

    @app.post(
        "/translate",
        tags=["translate"],
        summary="Translate Text",
        response_model=TranslateAnswer,
        response_model_exclude_none=True,
        responses=_errors(400, 403, 409, 413, 422, 429, 503, 504),
        openapi_extra=_bodies(TranslateBody, TranslateForm),
    )
    async def translate(request: Request) -> JSONResponse:
        fields, is_json = await read_fields(request, limits.max_body_bytes)
        tenant, call_limits = await _caller(gateway, request, fields)
        call = parse_translate(fields, is_json, call_limits, gateway.languages)
        body = await gateway.translate(call, tenant, _trace_headers(request))
        gateway.stats.count(200)
        return JSONResponse(body)

    @app.get(
        "/translate/result/{request_id}",
        tags=["translate"],
        summary="Fetch a translation by request id (extension)",
        response_model=TranslateAnswer,
        response_model_exclude_none=True,
        responses={
            202: {"model": PendingAnswer, "description": "Not translated yet"},
            **_errors(400, 403, 404, 409, 429, 503, 504),
        },
        openapi_extra=EXTENSION,
    )
    async def result(request: Request, request_id: str, api_key: str | None = None) -> JSONResponse:
        tenant = await gateway.tenant(api_key)
        status, body = await gateway.fetch(tenant, request_id)
        return JSONResponse(body, status_code=status)

    @app.get("/languages", tags=["translate"], summary="Get Supported Languages")
    async def languages() -> list[Language]:
        return [Language(**entry) for entry in gateway.languages.listing()]

    @app.post(
        "/detect",
        tags=["translate"],
        summary="Detect Language of Text",
        responses=_errors(400, 403, 413, 503),
        openapi_extra=_bodies(DetectBody, DetectBody),
    )
    async def detect(request: Request) -> list[DetectedLanguage]:
        fields, is_json = await read_fields(request, limits.max_body_bytes)
        _, call_limits = await _caller(gateway, request, fields)
        if fields.get("q") in (None, "", []):
            raise missing("q")
        texts, as_list = parse_q(fields, is_json, call_limits)
        if as_list:  # extension: one answer per text, each text on its own
            found = gateway.detect(texts)
            return [
                DetectedLanguage(confidence=round(d.confidence * 100, 1), language=d.language or "")
                for d in found
            ]
        return [DetectedLanguage(**d) for d in gateway.ranked(texts[0])]


def _add_file_routes(
    app: FastAPI, gateway: Gateway, files: FileJobs, limits: GatewaySettings
) -> None:
    """Translate a file and download the result."""

    @app.post(
        "/translate_file",
        tags=["translate"],
        summary="Translate a File",
        response_model=FileAnswer,
        responses={
            202: {"model": FileJobAnswer, "description": "A large file: poll statusUrl"},
            **_errors(400, 403, 413, 429, 503, 504),
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "multipart/form-data": {"schema": {"$ref": "#/components/schemas/FileForm"}}
                },
            }
        },
    )
    async def translate_file(request: Request) -> JSONResponse:
        length = request.headers.get("content-length")
        if length is None or not length.isdigit() or int(length) > limits.max_file_bytes + 65536:
            raise ApiError(
                413, f"Invalid request: a file may have at most {limits.max_file_bytes} bytes"
            )
        if not limits.files_translation:
            raise ApiError(403, FILES_DISABLED)
        form = await request.form()
        fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
        tenant, _ = await _caller(gateway, request, fields)
        upload = form.get("file")
        status, body = await files.translate(upload, fields, tenant, str(request.base_url))
        return JSONResponse(body, status_code=status)

    @app.get(
        "/translate_file/{job_id}",
        tags=["translate"],
        summary="Poll a file job (extension)",
        response_model=FileAnswer,
        responses={
            202: {"model": FileJobAnswer, "description": "Still running"},
            **_errors(400, 403, 404, 429, 500, 503),
        },
        openapi_extra=EXTENSION,
    )
    async def file_job(job_id: str, api_key: str | None = None) -> JSONResponse:
        if not limits.files_translation:
            raise ApiError(403, FILES_DISABLED)
        tenant = await gateway.tenant(api_key)
        status, body = files.status(job_id, tenant)
        return JSONResponse(body, status_code=status)

    @app.get(
        "/download_file/{filename}",
        tags=["translate"],
        summary="Download a translated file",
        response_class=FileResponse,
        responses={
            200: {"content": {"application/octet-stream": {}}, "description": "The file"},
            **_errors(400, 404),
        },
    )
    async def download_file(filename: str) -> Response:
        if not limits.files_translation:
            raise ApiError(400, FILES_DISABLED)
        return files.download(filename)


def _add_misc_routes(
    app: FastAPI, gateway: Gateway, files: FileJobs, limits: GatewaySettings
) -> None:
    """The frontend's settings, suggestions, health and this process's status."""

    @app.get("/frontend/settings", tags=["misc"], summary="Retrieve Frontend Settings")
    async def frontend_settings() -> dict[str, Any]:
        target = gateway.languages.tags[0] if gateway.languages.tags else "en"
        return {
            "charLimit": limits.char_limit,
            "frontendTimeout": limits.frontend_timeout_ms,
            "apiKeys": True,
            "keyRequired": limits.require_api_key,
            "suggestions": limits.suggestions,
            "filesTranslation": limits.files_translation,
            "supportedFilesFormat": list(files.suffixes) if limits.files_translation else [],
            "language": {
                "source": {"code": "auto", "name": "Auto Detect"},
                "target": {"code": target, "name": display_name(target)},
            },
        }

    @app.post(
        "/suggest",
        tags=["misc"],
        summary="Submit a Suggestion to Improve a Translation",
        responses=_errors(400, 403, 413),
        openapi_extra=_bodies(SuggestBody, SuggestBody),
    )
    async def suggest(request: Request) -> dict[str, bool]:
        if not limits.suggestions:
            raise ApiError(403, "Suggestions are disabled on this server.")
        fields, _ = await read_fields(request, limits.max_body_bytes)
        suggestion = {}
        for name in ("q", "s", "source", "target"):
            value = fields.get(name)
            if not isinstance(value, str) or not value:
                raise missing(name)
            if len(value) > limits.char_limit:
                raise over_limit(len(value), limits.char_limit)
            suggestion[name] = value
        await gateway.store.keep_suggestion(suggestion)
        return {"success": True}

    page = (Path(__file__).parent / "page.html").read_bytes()

    @app.get("/", include_in_schema=False)
    async def home() -> Response:
        """A page for people: translate a text or a file (the API's own calls)."""
        return Response(page, media_type="text/html; charset=utf-8")

    @app.get("/health", tags=["misc"], summary="Health Check")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", tags=["misc"], summary="Prometheus Metrics", include_in_schema=False)
    async def prometheus_metrics(request: Request) -> Response:
        if not limits.metrics:
            raise ApiError(404, "Not Found")
        token = limits.metrics_auth_token
        given = request.headers.get("authorization", "")
        if token is not None and not hmac.compare_digest(
            given.encode(), f"Bearer {token}".encode()
        ):
            raise ApiError(401, "Unauthorized", headers={"WWW-Authenticate": "Bearer"})
        return Response(metrics.gateway_exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get(
        "/babelstream/gateway",
        tags=["misc"],
        summary="This gateway process: Kafka, reply topic, counters (extension)",
        responses=_errors(403, 503),
        openapi_extra=EXTENSION,
    )
    async def gateway_status(api_key: str | None = None) -> dict[str, Any]:
        status = dict(gateway.status())
        if api_key is None and gateway.settings.gateway.require_api_key:
            # a gateway that requires keys shows its internals to keys only; a probe
            # (`babelstream status`, an orchestrator) sees whether it reaches Kafka
            return {"kafka": status["kafka"]}
        await gateway.tenant(api_key)  # an unknown key is a 403 here too
        return status

    @app.get(
        "/babelstream/ready",
        tags=["misc"],
        summary="Whether this process serves calls: 200 once it reaches Kafka (extension)",
        responses=_errors(503),
        openapi_extra=EXTENSION,
    )
    async def ready() -> dict[str, str]:
        # a readiness probe: `/health` is LibreTranslate's and always answers ok
        kafka = gateway.status()["kafka"]
        if kafka != "available":
            raise ApiError(503, f"Not ready: Kafka {kafka}")
        return {"status": "ready", "kafka": kafka}


def _add_docs(app: FastAPI) -> None:
    """Swagger UI on /docs, served from the installed bundle (no CDN)."""
    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs/static", StaticFiles(directory=swagger_ui_path), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        from fastapi.openapi.docs import get_swagger_ui_html

        return get_swagger_ui_html(
            openapi_url="/spec",
            title="LibreTranslate API (Babel Stream gateway)",
            swagger_js_url="/docs/static/swagger-ui-bundle.js",
            swagger_css_url="/docs/static/swagger-ui.css",
            swagger_favicon_url="/docs/static/favicon-32x32.png",
        )


def _examples(gateway: Gateway) -> dict[str, list[dict[str, Any]]]:
    """Example bodies, in a pair the registry serves (Swagger UI's "try it out" uses them)."""
    pairs = sorted(gateway.languages.pairs)
    source, target = pairs[0] if pairs else ("en", "es")
    call = {"q": "Hello world!", "source": source, "target": target}
    return {
        "TranslateBody": [
            call,
            {**call, "q": ["Hello world!", "<p>Good <b>morning</b></p>"], "format": "html"},
            {**call, "source": "auto"},
        ],
        "TranslateForm": [call],
        "DetectBody": [{"q": "Hello world!"}],
    }


def _with_schemas(
    app: FastAPI, models: list[type[BaseModel]], examples: dict[str, list[dict[str, Any]]]
) -> None:
    """Put the request bodies' schemas (named by their models) into the generated spec."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = generate()
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        for model in models:
            schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(schema.pop("$defs", {}))
            if model.__name__ in examples:
                schema["examples"] = examples[model.__name__]
            schemas[model.__name__] = schema
        # validation errors answer 400 with {"error"} (LibreTranslate's), never FastAPI's 422
        for operations in spec["paths"].values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        spec["info"]["x-babelstream-extensions"] = [*EXTENSIONS, "format: markdown, xml"]
        spec["info"]["x-formats"] = list(FORMATS)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
