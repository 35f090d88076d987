"""cuBLAS 12 for CTranslate2: loaded from the wheel's folder, or one line naming the fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.engine import gpu_runtime
from pipeline.engine.gpu_runtime import CUBLAS_LIBRARIES, INSTALL_HINT, CublasStatus
from pipeline.engine.translator import resolve_device
from pipeline.errors import ConfigError
from pipeline.settings import PROJECT_ROOT

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def system_has_cublas() -> bool:
    return gpu_runtime._load(CUBLAS_LIBRARIES, None) is None


def find_in_a_fresh_process(site: Path) -> CublasStatus:
    """``find_cublas()`` in a new interpreter with ``site`` on its path: a library loaded
    once stays loaded (and found by name) for the rest of a process."""
    code = (
        "import json; from pipeline.engine.gpu_runtime import find_cublas; "
        "s = find_cublas(); print(json.dumps([s.loaded_from, s.problem]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(PROJECT_ROOT)])}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    loaded_from, problem = json.loads(out.stdout)
    return CublasStatus(loaded_from, problem)


def fake_wheel(site: Path) -> Path:
    """The wheel's layout (nvidia/cublas/lib), with two real, empty shared libraries."""
    lib = site / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    (site / "nvidia" / "cublas" / "__init__.py").write_text("")
    source = site / "empty.c"
    source.write_text("int babelstream_probe(void) { return 0; }\n")
    for name in CUBLAS_LIBRARIES:
        subprocess.run(
            ["cc", "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", str(lib / name), str(source)],
            check=True,
        )
    return lib


@pytest.mark.skipif(system_has_cublas(), reason="this host has cuBLAS 12 of its own")
def test_the_wheels_libraries_are_loaded(tmp_path: Path) -> None:
    lib = fake_wheel(tmp_path)
    status = find_in_a_fresh_process(tmp_path)
    assert status.ok and status.loaded_from == str(lib)


@pytest.mark.skipif(system_has_cublas(), reason="this host has cuBLAS 12 of its own")
def test_without_the_wheel_one_line_names_the_install(tmp_path: Path) -> None:
    status = find_in_a_fresh_process(tmp_path)
    assert not status.ok and status.loaded_from is None
    assert status.problem is not None and "\n" not in status.problem
    assert "libcublas.so.12" in status.problem and INSTALL_HINT in status.problem


@pytest.mark.skipif(system_has_cublas(), reason="this host has cuBLAS 12 of its own")
def test_a_broken_wheel_says_which_folder(tmp_path: Path) -> None:
    lib = tmp_path / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    (tmp_path / "nvidia" / "cublas" / "__init__.py").write_text("")
    (lib / CUBLAS_LIBRARIES[0]).write_text("not a library")
    status = find_in_a_fresh_process(tmp_path)
    assert not status.ok and str(lib) in (status.problem or "")


def test_a_gpu_asked_for_where_none_is_seen_is_refused_in_one_line() -> None:
    import ctranslate2

    if ctranslate2.get_cuda_device_count() > 0:
        pytest.skip("this host has a GPU")
    assert resolve_device("auto") == "cpu"
    with pytest.raises(ConfigError, match=r"engine\.device=cuda, but CTranslate2 sees no GPU"):
        resolve_device("cuda")
