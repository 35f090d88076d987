"""Model sources built in the test itself, and a local HTTP server to download them from.

No model hub is reachable where the tests run, so the archives people import
are made here in their real layouts: an Argos package (a zip of one folder
with ``metadata.json``, a CTranslate2 ``model/``, ``sentencepiece.model`` and
``stanza/``) around the demo model, and OPUS-MT releases (a zip of a Marian
``.npz``, ``*.vocab.yml``, ``source.spm`` / ``target.spm``, ``README.md``,
``LICENSE``) with small random weights from the bench model builder.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pipeline.bench.model import BenchModelShape, train_tokenizer, write_marian
from pipeline.settings import PROJECT_ROOT

DEMO = PROJECT_ROOT / "models" / "demo"
# small weights: the tests are about the import, not the engine
TINY = BenchModelShape(
    d_model=64, encoder_layers=1, decoder_layers=1, heads=2, ffn=128, vocab_size=1000
)
ARGOS_METADATA: dict[str, Any] = {
    "package_version": "1.0",
    "argos_version": "1.9.0",
    "from_code": "en",
    "from_name": "English",
    "to_code": "en-XA",
    "to_name": "Pseudo-English",
    "target_prefix": ">>en-XA<<",
    "type": "translate",
}


def argos_package(path: Path, metadata: Mapping[str, Any] | None = None) -> Path:
    """An ``.argosmodel`` at ``path`` holding the demo model in Argos's layout."""
    folder = path.parent / f"{path.stem}.build" / "translate-en_en-XA-1_0"
    model = folder / "model"
    model.mkdir(parents=True)
    for name in ("model.bin", "shared_vocabulary.json"):
        shutil.copyfile(DEMO / name, model / name)
    # Argos passes SentencePiece pieces as they are; CTranslate2 appends </s> itself
    config = json.loads((DEMO / "config.json").read_text(encoding="utf-8"))
    (model / "config.json").write_text(json.dumps({**config, "add_source_eos": True}))
    shutil.copyfile(DEMO / "spm.model", folder / "sentencepiece.model")
    (folder / "stanza").mkdir()
    (folder / "stanza" / "tokenize.pt").write_bytes(b"\0" * 16)
    (folder / "README.md").write_text("# English - Pseudo-English\n\nLicense: CC0-1.0\n")
    chosen = ARGOS_METADATA if metadata is None else metadata
    (folder / "metadata.json").write_text(json.dumps(chosen))
    _zip(folder.parent, path)
    shutil.rmtree(folder.parent)
    return path


def opus_release(path: Path, sources: tuple[str, ...], targets: tuple[str, ...]) -> Path:
    """An OPUS-MT-style release zip at ``path`` (random weights, its README naming the
    languages; several targets: ``>>tgt<<`` tokens, as OPUS-MT's multilingual releases)."""
    folder = path.parent / f"{path.stem}.build"
    tokens = tuple(f">>{t}<<" for t in targets) if len(targets) > 1 else ()
    sp_model = train_tokenizer(TINY.vocab_size, 2000, seed=7, symbols=tokens)
    write_marian(folder, TINY, sp_model, seed=7)
    (folder / "model.npz").rename(
        folder / "opus.spm32k-spm32k.transformer-align.model1.npz.best-perplexity.npz"
    )
    (folder / "vocab.yml").rename(folder / "opus.spm32k-spm32k.vocab.yml")
    (folder / "spm.model").rename(folder / "source.spm")
    shutil.copyfile(folder / "source.spm", folder / "target.spm")
    readme = [
        "# opus-2020-02-26.zip",
        "",
        "* dataset: opus",
        "* model: transformer-align",
        f"* source language(s): {' '.join(sources)}",
        f"* target language(s): {' '.join(targets)}",
        "* pre-processing: normalization + SentencePiece",
    ]
    if tokens:
        readme.append("* a sentence initial language token is required in the form of `>>id<<`")
    (folder / "README.md").write_text("\n".join(readme) + "\n")
    (folder / "LICENSE").write_text("Attribution 4.0 International\n\n=======\n")
    _zip(folder, path)
    shutil.rmtree(folder)
    return path


def _zip(folder: Path, path: Path) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                out.write(file, file.relative_to(folder))


@dataclass
class FileServer:
    """What the local server serves and what it was asked: ``files`` by URL path;
    ``cut_first`` cuts each file's first answer after that many bytes."""

    files: dict[str, bytes] = field(default_factory=dict)
    cut_first: int | None = None
    ranges: list[str | None] = field(default_factory=list)
    base: str = ""
    _cut_done: set[str] = field(default_factory=set)

    def url(self, path: str) -> str:
        return f"{self.base}/{path.lstrip('/')}"


@contextmanager
def serving(files: Mapping[str, bytes] | None = None, **options: Any) -> Iterator[FileServer]:
    """A threaded HTTP server on 127.0.0.1 honouring ``Range: bytes=N-``."""
    state = FileServer(dict(files or {}), **options)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = state.files.get(self.path)
            state.ranges.append(self.headers.get("Range"))
            if body is None:
                self.send_error(HTTPStatus.NOT_FOUND)
                return
            start = 0
            found = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if found:
                start = int(found.group(1))
                if start >= len(body):
                    self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(HTTPStatus.PARTIAL_CONTENT)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(HTTPStatus.OK)
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            payload = body[start:]
            if state.cut_first is not None and self.path not in state._cut_done:
                state._cut_done.add(self.path)
                self.wfile.write(payload[: state.cut_first])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
