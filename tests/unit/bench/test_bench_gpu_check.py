"""The GPU check's install list and its CUDA 13 measuring aid."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bench.gpu_check import CUBLAS_13, cuda13_as_12, requirements


def test_the_wheels_are_the_projects_with_the_gpu_extra_less_what_is_skipped() -> None:
    wanted = requirements()
    names = {r.split("==")[0].split(">")[0].split("<")[0].lower() for r in wanted}
    assert {"ctranslate2", "nvidia-cublas-cu12", "setuptools", "faust-streaming"} <= names
    assert "pyspark" not in names, "a source archive only, and no Spark job runs"
    fewer = requirements(("nvidia-cublas-cu12", "Lingua-Language-Detector"))
    assert len(fewer) == len(wanted) - 2
    assert not [r for r in fewer if r.lower().startswith(("nvidia-cublas", "lingua"))]


def test_cuda_13s_cublas_is_linked_under_the_cuda_12_names(tmp_path: Path) -> None:
    lib = tmp_path / "cuda-13" / "lib64"
    lib.mkdir(parents=True)
    for name in CUBLAS_13:
        (lib / name).write_bytes(b"\x7fELF")
    folder = cuda13_as_12(lib, tmp_path / "linked")
    assert sorted(p.name for p in folder.iterdir()) == ["libcublas.so.12", "libcublasLt.so.12"]
    assert (folder / "libcublas.so.12").resolve() == (lib / "libcublas.so.13").resolve()
    (lib / "libcublasLt.so.13").unlink()
    with pytest.raises(FileNotFoundError, match=r"libcublasLt\.so\.13"):
        cuda13_as_12(lib, tmp_path / "again")
