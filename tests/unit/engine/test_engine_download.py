"""Model downloads from a local HTTP server: resumed, restarted, checked, never half landed."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import pytest

from pipeline.engine.imports.download import download, file_name
from pipeline.errors import ModelSourceError, ServiceUnavailable
from pipeline.settings import ModelImportSettings
from tests.model_archives import serving

BODY = os.urandom(300_000)
SHA = hashlib.sha256(BODY).hexdigest()


def _settings(tmp_path: Path, attempts: int = 3) -> ModelImportSettings:
    return ModelImportSettings(
        download_dir=tmp_path / "downloads",
        download_attempts=attempts,
        download_retry_s=0,
        download_timeout_s=5,
    )


def test_a_download_cut_off_resumes_from_the_bytes_it_has(tmp_path):
    with serving({"/m.zip": BODY}, cut_first=100_000) as server:
        got = download(server.url("m.zip"), _settings(tmp_path), sha256=SHA, progress=False)
    assert got.read_bytes() == BODY
    assert server.ranges == [None, "bytes=100000-"]
    assert sorted(p.name for p in got.parent.iterdir()) == ["m.zip"]


def test_a_partial_file_from_an_earlier_run_is_resumed(tmp_path):
    settings = _settings(tmp_path)
    settings.download_dir.mkdir()
    (settings.download_dir / "m.zip.part").write_bytes(BODY[:5000])
    with serving({"/m.zip": BODY}) as server:
        got = download(server.url("m.zip"), settings, progress=False)
    assert got.read_bytes() == BODY and server.ranges == ["bytes=5000-"]


def test_a_partial_file_as_long_as_the_servers_is_whole(tmp_path):
    settings = _settings(tmp_path)
    settings.download_dir.mkdir()
    (settings.download_dir / "m.zip.part").write_bytes(BODY)
    with serving({"/m.zip": BODY}) as server:
        got = download(server.url("m.zip"), settings, sha256=SHA, progress=False)
    assert got.read_bytes() == BODY and server.ranges == [f"bytes={len(BODY)}-"]


def test_a_file_already_downloaded_with_its_checksum_is_not_fetched_again(tmp_path):
    settings = _settings(tmp_path)
    settings.download_dir.mkdir()
    (settings.download_dir / "m.zip").write_bytes(BODY)
    with serving({"/m.zip": BODY}) as server:
        download(server.url("m.zip"), settings, sha256=SHA, progress=False)
    assert server.ranges == []


def test_a_checksum_mismatch_leaves_no_file(tmp_path):
    settings = _settings(tmp_path)
    with (
        serving({"/m.zip": BODY}) as server,
        pytest.raises(ModelSourceError, match="checksum mismatch"),
    ):
        download(server.url("m.zip"), settings, sha256="0" * 64, progress=False)
    assert list(settings.download_dir.iterdir()) == []


def test_a_missing_file_is_one_error_at_once(tmp_path):
    with serving({}) as server, pytest.raises(ModelSourceError, match="HTTP 404"):
        download(server.url("nothing.zip"), _settings(tmp_path), progress=False)
    assert len(server.ranges) == 1


def test_an_unreachable_server_is_tried_then_unavailable(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ServiceUnavailable, match="after 2 tries"):
        download(f"http://127.0.0.1:{port}/m.zip", _settings(tmp_path, 2), progress=False)


def test_a_url_names_the_file_it_lands_in():
    assert file_name("https://h/models/en-de/opus-2020-02-26.zip?x=1") == "opus-2020-02-26.zip"
    with pytest.raises(ModelSourceError, match="names no file"):
        file_name("https://h/")
