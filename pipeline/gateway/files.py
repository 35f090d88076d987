"""``POST /translate_file``: one uploaded file translated as a bulk job.

Plain text (``.txt``) is cut into sentences, HTML (``.html``, ``.htm``) and
Markdown (``.md``) are one document each whose markup the fidelity layer
keeps (so such a file may hold at most ``limits.max_text_bytes`` of
UTF-8), and in SubRip subtitles (``.srt``) each cue's text is one text to
translate, its number and times kept. The job runs at bulk priority
(``translate.work-bulk.<model>``, behind interactive work), reads its
results from the gateway process's reply topic, and keeps its state under
``gateway.files_dir/<job id>/`` like any bulk job (``babelstream bulk
status``). The call waits for the job, as LibreTranslate's does, then
answers the translated file's URL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import srt
from fastapi.responses import FileResponse
from starlette.datastructures import UploadFile

from pipeline.bulk import BulkError
from pipeline.bulk.readers import CorpusReader
from pipeline.bulk.runner import JobSpec, run_job
from pipeline.contract.pairs import Pair
from pipeline.gateway.calls import ApiError, missing, not_supported
from pipeline.gateway.languages import display_name
from pipeline.gateway.link import FILE_JOB_PREFIX
from pipeline.settings import Settings

if TYPE_CHECKING:
    from pipeline.gateway.service import Gateway

log = logging.getLogger(__name__)

# file suffix -> how its text is parsed (SUBTITLES: each cue's text is one plain text)
SUBTITLES = "subtitles"
SUFFIXES: dict[str, str] = {
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".srt": SUBTITLES,
}
_JOB = re.compile(rf"{FILE_JOB_PREFIX}[0-9a-f]{{32}}")
# a job's translated file, in its folder beside the upload and the bulk job's own files
OUTPUT_DIR = "out"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def parse_cues(text: str) -> list[srt.Subtitle]:
    """The cues of a SubRip file, or a 400 naming where it stops being one."""
    try:
        return list(srt.parse(text))
    except srt.SRTParseError as exc:
        unexpected = exc.unmatched_content[:40]
        raise ApiError(
            400,
            f"Invalid request: not a SubRip (.srt) file: at character {exc.expected_start}, "
            f"{unexpected!r} is not a cue",
        ) from None


def write_cues(cues: Sequence[srt.Subtitle], path: Path) -> list[str]:
    """Write the cues with text as a JSON Lines corpus, a document each, and answer their
    ids (a cue's position; its lines are one text, one sentence broken for the screen)."""
    ids = []
    with path.open("w", encoding="utf-8") as corpus:
        for position, cue in enumerate(cues):
            text = " ".join(cue.content.split())
            if text:
                ids.append(str(position))
                corpus.write(json.dumps({"id": str(position), "text": text}) + "\n")
    return ids


def compose_cues(cues: Sequence[srt.Subtitle], translations: dict[str, str]) -> str:
    """The SubRip file with each cue's text replaced by its translation (by position;
    a cue without text stays as it was)."""
    translated = [
        srt.Subtitle(
            cue.index,
            cue.start,
            cue.end,
            translations.get(str(position), cue.content),
            cue.proprietary,
        )
        for position, cue in enumerate(cues)
    ]
    return str(srt.compose(translated, reindex=False))


def safe_name(filename: str) -> str:
    """A file name without paths or odd characters (werkzeug's ``secure_filename`` in spirit)."""
    name = _UNSAFE.sub("_", Path(filename).name).strip("._")
    return name or "file"


STATUS_FILE = "status.json"


def _write_status(job_dir: Path, status: dict[str, Any]) -> None:
    """Record a job's state where every gateway process sharing the folder reads it."""
    part = job_dir / f".{STATUS_FILE}.part"
    part.write_text(json.dumps(status), encoding="utf-8")
    part.replace(job_dir / STATUS_FILE)  # atomic: a reader sees the old state or the new


def _read_status(job_dir: Path) -> dict[str, Any]:
    """A job's recorded state; empty for a folder without one (or being deleted)."""
    try:
        found: dict[str, Any] = json.loads((job_dir / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found


def last_change(folder: Path) -> float:
    """The newest modification time of ``folder`` and everything in it."""
    times = [folder.stat().st_mtime]
    times += [p.stat().st_mtime for p in folder.rglob("*")]
    return max(times)


def expired_jobs(files_dir: Path, ttl_s: float, now: float) -> list[Path]:
    """The file jobs' folders under ``files_dir`` in which nothing changed for ``ttl_s``
    (folders not named as file jobs are never touched)."""
    if not files_dir.is_dir():
        return []
    return sorted(
        folder
        for folder in files_dir.iterdir()
        if folder.is_dir() and _JOB.fullmatch(folder.name) and now - last_change(folder) > ttl_s
    )


@dataclass(frozen=True, slots=True)
class _Upload:
    """An uploaded file as checked: its name and suffix, bytes and text (a subtitle file's
    cues too), and the pair it is translated by (source and target alike: as it is)."""

    filename: str
    suffix: str
    data: bytes
    text: str
    cues: list[srt.Subtitle] | None
    pair: Pair


class FileJobs:
    """Runs file translations and serves their results."""

    def __init__(self, settings: Settings, gateway: Gateway) -> None:
        self._settings = settings
        self._gateway = gateway
        self._dir = settings.gateway.files_dir
        # the jobs running in the background (a task nobody holds may be collected)
        self._tasks: set[asyncio.Task[str]] = set()

    @property
    def suffixes(self) -> tuple[str, ...]:
        return tuple(SUFFIXES)

    async def translate(
        self, upload: Any, fields: dict[str, Any], tenant: str, base_url: str
    ) -> tuple[int, dict[str, Any]]:
        """Translate an uploaded file: 200 with the translation's URL, or for an upload over
        ``gateway.sync_file_bytes`` 202 with the job to poll."""
        checked = await self._checked(upload, fields)
        self._admit(tenant)
        job_id = f"{FILE_JOB_PREFIX}{uuid.uuid4().hex}"
        name = safe_name(checked.filename)
        job_dir = self._dir / job_id
        job_dir.mkdir(parents=True, exist_ok=True)
        _write_status(job_dir, {"tenant": tenant, "state": "running"})
        source_file = job_dir / f"source{checked.suffix}"
        source_file.write_bytes(checked.data)
        translate = None
        if checked.pair.source != checked.pair.target:
            spec = JobSpec(
                job_id=job_id,
                pair=checked.pair,
                output=job_dir / "translated.parquet",
                inputs=(str(source_file),),
                fmt="text",
                tenant=tenant,
                text_format=SUFFIXES[checked.suffix],
                reply_topic=self._gateway.link.reply_topic,
            )
            translate = self._translation(spec, job_dir, checked.cues)
        base = base_url.rstrip("/")
        url = f"{base}/download_file/{job_id}.{name}"
        work = self._finish(job_dir, tenant, translate, checked.text, name, url)
        if len(checked.data) <= self._settings.gateway.sync_file_bytes:
            return 200, {"translatedFileUrl": await work}
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._job_ended)
        return 202, {
            "jobId": job_id,
            "status": "running",
            "statusUrl": f"{base}/translate_file/{job_id}",
        }

    async def _checked(self, upload: Any, fields: dict[str, Any]) -> _Upload:
        """The upload and its languages, or the 400 or 413 that says what is wrong."""
        languages = self._gateway.languages
        if not isinstance(upload, UploadFile):
            raise missing("file")
        source_code, target_code = fields.get("source"), fields.get("target")
        if not source_code:
            raise missing("source")
        if not target_code:
            raise missing("target")
        filename = upload.filename or ""
        if not filename:
            raise ApiError(400, "Invalid request: empty file")
        suffix = Path(filename).suffix.lower()
        if suffix not in SUFFIXES:
            raise ApiError(400, "Invalid request: file format not supported")
        auto = source_code.lower() == "auto"
        source = None if auto else languages.resolve(source_code)
        if not auto and source is None:
            raise not_supported(source_code.lower())
        target = languages.resolve(target_code)
        if target is None or not languages.sources_for(target):
            raise not_supported(target_code.lower())
        limit = self._settings.gateway.max_file_bytes
        data = await upload.read(limit + 1)
        if len(data) > limit:
            raise ApiError(413, f"Invalid request: a file may have at most {limit} bytes")
        try:
            text = data.decode("utf-8-sig")  # a byte order mark is not text to translate
        except UnicodeDecodeError:
            raise ApiError(400, "Invalid request: the file is not UTF-8 text") from None
        cues = parse_cues(text) if SUFFIXES[suffix] == SUBTITLES else None
        if source is None:
            among = [*languages.sources_for(target), target]
            sample = text if cues is None else "\n".join(cue.content for cue in cues)
            source = self._gateway.detect([sample[:2000]], among)[0].language or target
        if source != target and not languages.serves(source, target):
            raise ApiError(
                400,
                f"{display_name(target)} ({target}) is not available as a target language "
                f"from {display_name(source)} ({source})",
            )
        return _Upload(filename, suffix, data, text, cues, Pair(source, target))

    def _admit(self, tenant: str) -> None:
        """503 while Kafka is not reachable, 429 for a tenant running its most file jobs."""
        limits = self._settings.gateway
        link = self._gateway.link
        if not link.available:
            raise ApiError(
                503,
                link.problem or "Kafka is not reachable",
                headers={"Retry-After": str(limits.retry_after_s)},
            )
        if self.running(tenant) >= limits.max_file_jobs:
            raise ApiError(
                429,
                f"Slowdown: at most {limits.max_file_jobs} file jobs of a tenant at once",
                headers={"Retry-After": str(limits.retry_after_s)},
            )

    def _translation(
        self, spec: JobSpec, job_dir: Path, cues: list[srt.Subtitle] | None
    ) -> Callable[[], str]:
        """What makes the translated file (run in a thread): a bulk job over the upload as
        one document, or over a subtitle file's cues, a document each."""
        if cues is None:
            reader = CorpusReader([Path(spec.inputs[0])], fmt="text")
            return lambda: self._run(spec, reader)[0]
        corpus = job_dir / "cues.jsonl"
        ids = write_cues(cues, corpus)
        spec = dataclasses.replace(spec, inputs=(str(corpus),), fmt="jsonl", text_format="text")

        def translated() -> str:
            if not ids:  # nothing to translate: no job
                return compose_cues(cues, {})
            translations = self._run(spec, CorpusReader([corpus], fmt="jsonl"))
            return compose_cues(cues, dict(zip(ids, translations, strict=True)))

        return translated

    async def _finish(
        self,
        job_dir: Path,
        tenant: str,
        translate: Callable[[], str] | None,
        text: str,
        name: str,
        url: str,
    ) -> str:
        """Make the translated file (``translate``: None when ``text`` is already in the
        target language), keep it downloadable, and record how the job ended."""
        try:
            translated = text if translate is None else await asyncio.to_thread(translate)
            # apart from the upload and the job's own files: only this is ever downloadable
            (job_dir / OUTPUT_DIR).mkdir(exist_ok=True)
            (job_dir / OUTPUT_DIR / name).write_text(translated, encoding="utf-8")
        except ApiError as exc:
            ended = {"state": "failed", "status": exc.status, "error": exc.message}
            _write_status(job_dir, {"tenant": tenant, **ended})
            raise
        except BaseException:
            ended = {"state": "failed", "status": 500, "error": "Internal error: see the log"}
            _write_status(job_dir, {"tenant": tenant, **ended})
            raise
        _write_status(job_dir, {"tenant": tenant, "state": "done", "url": url})
        return url

    def _job_ended(self, task: asyncio.Task[str]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not isinstance(exc, ApiError):
            log.error("a file job failed", exc_info=exc)

    def running(self, tenant: str) -> int:
        """The tenant's file jobs running now, in every gateway process sharing ``files_dir``."""
        if not self._dir.is_dir():
            return 0
        return sum(
            1
            for folder in self._dir.iterdir()
            if _JOB.fullmatch(folder.name)
            and _read_status(folder) == {"tenant": tenant, "state": "running"}
        )

    def status(self, job_id: str, tenant: str) -> tuple[int, dict[str, Any]]:
        """``GET /translate_file/<job id>``: 202 while running, 200 with the download URL,
        or the job's error (404 for an unknown job or another tenant's)."""
        found = _read_status(self._dir / job_id) if _JOB.fullmatch(job_id) else {}
        if found.get("tenant") != tenant:
            raise ApiError(404, "No such file job")
        if found["state"] == "running":
            return 202, {"jobId": job_id, "status": "running"}
        if found["state"] == "done":
            return 200, {"translatedFileUrl": found["url"]}
        raise ApiError(int(found["status"]), str(found["error"]))

    def _run(self, spec: JobSpec, reader: CorpusReader) -> list[str]:
        """The translations of the job's documents, in their order."""
        settings = self._settings.model_copy(
            update={"bulk": self._settings.bulk.model_copy(update={"state_dir": self._dir})}
        )
        try:
            report = run_job(settings, spec, reader, progress=False)
        except BulkError as exc:
            # the job's messages name its files; callers are told what, not where
            message = str(exc).replace(str(self._dir), "<files>")
            raise ApiError(400, f"Cannot translate file: {message}") from None
        table = pq.read_table(report.output or "", columns=["translation", "status", "errors"])
        for row in table.to_pylist():
            if row["status"] != "ok":
                raise ApiError(400, f"Cannot translate file: {row['status']}: {row['errors']}")
        return [str(text or "") for text in table.column("translation").to_pylist()]

    def clean(self) -> int:
        """Delete the expired file jobs (``gateway.files_ttl_s``); how many were deleted."""
        expired = expired_jobs(self._dir, self._settings.gateway.files_ttl_s, time.time())
        for folder in expired:
            # another gateway process may be deleting it too
            shutil.rmtree(folder, ignore_errors=True)
        if expired:
            log.info("deleted %d expired file job(s) under %s", len(expired), self._dir)
        return len(expired)

    async def keep_clean(self) -> None:
        """Run on the event loop: :meth:`clean` every ``gateway.files_clean_every_s``."""
        while True:
            try:
                await asyncio.to_thread(self.clean)
            except OSError as exc:  # a folder gone under it, a disk error: try again later
                log.warning("could not clean expired file jobs: %s", exc)
            await asyncio.sleep(self._settings.gateway.files_clean_every_s)

    def download(self, filename: str) -> FileResponse:
        """``GET /download_file/<job id>.<name>``: the translated file, as an attachment."""
        job_id, _, name = filename.partition(".")
        if not _JOB.fullmatch(job_id) or not name or safe_name(name) != name:
            raise ApiError(400, "Invalid filename")
        path = self._dir / job_id / OUTPUT_DIR / name
        if not path.is_file():
            raise ApiError(404, "No such file")
        # a browser must not sniff a translated .html or .txt into something else
        return FileResponse(path, filename=name, headers={"X-Content-Type-Options": "nosniff"})
