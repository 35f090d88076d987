"""The CUDA libraries CTranslate2 needs on a GPU host, found and loaded before its first call.

CTranslate2's wheels (4.x) are built against CUDA 12: they open
``libcublas.so.12`` and ``libcublasLt.so.12`` at their first GPU call, not at
import. A host whose CUDA is older or newer (a CUDA 13 driver and toolkit)
has no such files, and without this module the first batch fails. The
``gpu`` extra (``pip install '.[gpu]'``, ``make gpu-runtime``) installs them
from the ``nvidia-cublas-cu12`` wheel; :func:`load_cublas` loads them
globally (``RTLD_GLOBAL``) so CTranslate2's own lookup by file name finds
them already loaded. The system's copies, when the loader finds them, come
first.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

# load order: libcublas.so.12 needs libcublasLt.so.12
CUBLAS_LIBRARIES = ("libcublasLt.so.12", "libcublas.so.12")
INSTALL_HINT = "pip install '.[gpu]' (make gpu-runtime), or set engine.device=cpu"


@dataclass(frozen=True)
class CublasStatus:
    """Where cuBLAS 12 was loaded from, or why it could not be."""

    loaded_from: str | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def wheel_library_dir() -> Path | None:
    """``nvidia/cublas/lib`` of the ``nvidia-cublas-cu12`` wheel, when installed."""
    try:
        spec = importlib.util.find_spec("nvidia.cublas")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        lib = Path(location) / "lib"
        if lib.is_dir():
            return lib
    return None


def _load(names: tuple[str, ...], folder: Path | None) -> str | None:
    """Load every library of ``names`` (from ``folder``, or the loader's path); the
    first failure's message, or None."""
    for name in names:
        target = str(folder / name) if folder is not None else name
        try:
            ctypes.CDLL(target, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            return str(exc)
    return None


def find_cublas() -> CublasStatus:
    """Load cuBLAS 12: the system's, else the wheel's (:func:`load_cublas` caches this)."""
    if _load(CUBLAS_LIBRARIES, None) is None:
        return CublasStatus("system")
    folder = wheel_library_dir()
    if folder is None:
        return CublasStatus(
            None, "libcublas.so.12 (CUDA 12's cuBLAS) is not installed: " + INSTALL_HINT
        )
    error = _load(CUBLAS_LIBRARIES, folder)
    if error is not None:
        return CublasStatus(None, f"cuBLAS 12 in {folder} does not load ({error})")
    return CublasStatus(str(folder))


# once per process: a loaded library stays loaded
load_cublas = functools.cache(find_cublas)
