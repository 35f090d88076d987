"""Downloads of model sources: streamed, resumed, checked, and landed atomically.

A download writes ``<name>.part`` beside its destination and renames it only
once it is whole and, when a SHA-256 is known, matches it: a destination file
is always a complete download. A try cut off part way is resumed by the next
(an HTTP ``Range`` request from the bytes on disk); a server that ignores
``Range`` answers 200 and the download restarts from the first byte.

Failure classes: transport errors, timeouts and 5xx answers are transient and
retried (``download_attempts``, backing off), then end as
:class:`~pipeline.errors.ServiceUnavailable`; a 4xx answer or a checksum that
does not match is :class:`~pipeline.errors.ModelSourceError` at once.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)
from tqdm import tqdm

from pipeline.errors import ModelSourceError, ServiceUnavailable
from pipeline.settings import ModelImportSettings

_CHUNK = 1 << 20


class _Transient(Exception):
    """A try that may succeed when repeated (cut off, timed out, a 5xx answer)."""


def is_url(source: str) -> bool:
    """Whether ``source`` names an HTTP(S) resource rather than a local path."""
    return urlparse(source).scheme in ("http", "https")


def file_name(url: str) -> str:
    """The last path segment of ``url``: the name its download is stored under."""
    name = Path(unquote(urlparse(url).path)).name
    if not name:
        raise ModelSourceError(f"{url}: the URL names no file")
    return name


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file, as lower-case hex."""
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(
    url: str,
    settings: ModelImportSettings,
    *,
    sha256: str | None = None,
    progress: bool | None = None,
) -> Path:
    """Fetch ``url`` into ``settings.download_dir``; return the complete file.

    A file already there is reused when ``sha256`` is given and matches.
    ``progress``: True draws a bar, False none, None a bar on a terminal only.
    """
    want = sha256.lower() if sha256 else None
    dest = settings.download_dir / file_name(url)
    if want and dest.is_file() and sha256_of(dest) == want:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    timeout = httpx.Timeout(settings.download_timeout_s)
    retrying = Retrying(
        stop=stop_after_attempt(settings.download_attempts),
        wait=wait_exponential(
            multiplier=settings.download_retry_s, max=settings.download_retry_max_s
        ),
        retry=retry_if_exception_type(_Transient),
        reraise=True,
    )
    with httpx.Client(timeout=timeout, follow_redirects=True) as client:
        try:
            for attempt in retrying:
                with attempt:
                    _fetch_once(client, url, part, progress)
        except _Transient as exc:
            held = part.stat().st_size if part.exists() else 0
            raise ServiceUnavailable(
                f"{url}: download failed after {settings.download_attempts} tries ({exc}); "
                f"run the command again to resume from byte {held}"
            ) from None
    got = sha256_of(part)
    if want and got != want:
        part.unlink()
        raise ModelSourceError(
            f"{url}: checksum mismatch (sha256 {got}, expected {want}); the download was deleted"
        )
    os.replace(part, dest)
    return dest


def _fetch_once(client: httpx.Client, url: str, part: Path, progress: bool | None) -> None:
    """One try: append to ``part`` from where it ends (or start over); raise _Transient
    when the try may be repeated."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code == 416 and have:
                # nothing past what we hold: whole if the server's length is ours
                if response.headers.get("content-range", "").endswith(f"/{have}"):
                    return
                part.unlink()
                raise _Transient("the partial download did not match the server's file")
            if response.status_code >= 500:
                raise _Transient(f"HTTP {response.status_code}")
            if response.status_code >= 400:
                raise ModelSourceError(f"{url}: HTTP {response.status_code}")
            resumed = response.status_code == 206
            start = have if resumed else 0
            length = response.headers.get("content-length")
            total = start + int(length) if length is not None else None
            with (
                part.open("ab" if resumed else "wb") as out,
                tqdm(
                    total=total,
                    initial=start,
                    unit="B",
                    unit_scale=True,
                    desc=part.name.removesuffix(".part"),
                    disable=None if progress is None else not progress,
                ) as bar,
            ):
                for chunk in response.iter_bytes():  # as received: a cut keeps its bytes
                    out.write(chunk)
                    bar.update(len(chunk))
            if total is not None and part.stat().st_size < total:
                raise _Transient(f"cut off at {part.stat().st_size} of {total} bytes")
    except httpx.TransportError as exc:
        raise _Transient(str(exc) or type(exc).__name__) from exc
