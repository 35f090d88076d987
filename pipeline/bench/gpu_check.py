"""The GPU check: one JSON report of what a GPU host gives, for a host without a registry.

``python -m pipeline.bench.gpu_check wheels`` (here, with a package registry)
puts every wheel the project needs on the GPU host (Python 3.12, Linux x86-64,
the ``gpu`` extra) into ``.whl/``; ``make gpu-check`` (there) installs from that
folder alone and runs ``python -m pipeline.bench.gpu_check run``: the host's
CUDA facts, ``bench engine`` (compute types and batch sizes), ``bench
replicas`` (replicas by call size, and the plan a GPU worker would choose)
and, where a local stack can start (Java and the Kafka jars), ``bench
hotpath``. A step that cannot run is recorded with its reason; the others
still run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from pipeline.settings import PROJECT_ROOT

# the GPU hosts this check was written for: CPython 3.12 on Linux x86-64
PYTHON_VERSION = "3.12"
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)
STEP_TIMEOUT_S = 1800


# on PyPI as a source archive only (300 MB); the GPU check runs no Spark job
NOT_NEEDED = ("pyspark",)


def requirements(
    skip: tuple[str, ...] = (), pyproject: Path = PROJECT_ROOT / "pyproject.toml"
) -> list[str]:
    """The project's dependencies with the ``gpu`` extra, and what installing it needs,
    less :data:`NOT_NEEDED` and the distributions named in ``skip``."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    wanted = [
        *data["project"]["dependencies"],
        *data["project"]["optional-dependencies"]["gpu"],
        *data["build-system"]["requires"],
    ]
    left_out = {name.lower() for name in (*NOT_NEEDED, *skip)}
    return [r for r in wanted if re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() not in left_out]


def download_wheels(dest: Path, skip: tuple[str, ...] = ()) -> None:
    """Every wheel of :func:`requirements` for the GPU host's Python and platform, and
    ``requirements.txt`` beside them (what ``make gpu-check`` installs)."""
    wanted = requirements(skip)
    command = [
        *(sys.executable, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:"),
        *("--python-version", PYTHON_VERSION, "--implementation", "cp"),
        *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
        *wanted,
    ]
    subprocess.run(command, check=True)
    (dest / "requirements.txt").write_text("\n".join(wanted) + "\n", encoding="utf-8")


def _step(name: str, command: list[str]) -> dict[str, Any]:
    """Run one ``babelstream`` command; its JSON report, or why there is none."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return {"step": name, "ok": False, "reason": f"still running after {STEP_TIMEOUT_S}s"}
    if done.returncode != 0:
        return {"step": name, "ok": False, "reason": done.stderr.strip()[-2000:]}
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"step": name, "ok": False, "reason": f"no JSON report: {done.stdout[-500:]}"}
    return {"step": name, "ok": True, "report": report}


def cuda_facts() -> dict[str, Any]:
    """What CTranslate2 sees, where cuBLAS 12 came from, and the driver's own words."""
    import ctranslate2

    from pipeline.engine.gpu_runtime import load_cublas

    cublas = load_cublas()
    facts: dict[str, Any] = {
        "ctranslate2": ctranslate2.__version__,
        "cuda_devices": ctranslate2.get_cuda_device_count(),
        "cublas_loaded_from": cublas.loaded_from,
        "cublas_problem": cublas.problem,
    }
    if facts["cuda_devices"]:
        facts["compute_types"] = sorted(ctranslate2.get_supported_compute_types("cuda"))
    smi = shutil.which("nvidia-smi")
    if smi:
        query = "--query-gpu=name,driver_version,memory.total"
        out = subprocess.run([smi, query, "--format=csv,noheader"], capture_output=True, text=True)
        facts["nvidia_smi"] = out.stdout.strip()
    return facts


CUBLAS_13 = ("libcublas.so.13", "libcublasLt.so.13")


def cuda13_as_12(cuda_lib: Path, folder: Path) -> Path:
    """Links named ``libcublas(.Lt).so.12`` in ``folder`` to CUDA 13's libraries in
    ``cuda_lib``: enough to measure on a host with CUDA 13 alone, not a supported install
    (that is the ``gpu`` extra)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in CUBLAS_13:
        target = cuda_lib / name
        if not target.exists():
            raise FileNotFoundError(f"{target} not found")
        link = folder / name.replace(".so.13", ".so.12")
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    return folder


def run_checks(pair: str, cuda13_lib: Path | None = None) -> dict[str, Any]:
    """Every step of the check, in order; see the module's docstring."""
    if cuda13_lib is not None:
        linked = cuda13_as_12(cuda13_lib, PROJECT_ROOT / "var" / "cuda13-as-12")
        paths = [str(linked), os.environ.get("LD_LIBRARY_PATH", "")]
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in paths if p)
    babelstream = [sys.executable, "-m", "pipeline"]
    steps = []
    if pair == "en_en-XB" and not (PROJECT_ROOT / "var" / "models" / "bench").exists():
        steps.append(_step("build the bench model", [*babelstream, "models", "build-bench"]))
    steps.append(_step("bench engine", [*babelstream, "bench", "engine", "--pair", pair, "--json"]))
    steps.append(
        _step("bench replicas", [*babelstream, "bench", "replicas", "--pair", pair, "--json"])
    )
    up = subprocess.run([*babelstream, "up"], capture_output=True, text=True, check=False)
    if up.returncode == 0:
        steps.append(
            _step("bench hotpath", [*babelstream, "bench", "hotpath", "--pair", pair, "--json"])
        )
        subprocess.run([*babelstream, "down"], capture_output=True, check=False)
    else:
        reason = (up.stderr or up.stdout).strip().splitlines()[-1:] or ["no output"]
        steps.append({"step": "bench hotpath", "ok": False, "reason": f"no stack: {reason[0]}"})
    facts = {**cuda_facts(), "cuda13_as_12": str(cuda13_lib) if cuda13_lib else None}
    return {"cuda": facts, "steps": steps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.bench.gpu_check")
    sub = parser.add_subparsers(dest="what", required=True)
    wheels = sub.add_parser("wheels", help="download the GPU host's wheels (needs a registry)")
    wheels.add_argument("--dest", type=Path, default=PROJECT_ROOT / ".whl")
    wheels.add_argument(
        "--skip",
        action="append",
        default=[],
        help="a distribution the GPU host has already (or cannot take); repeatable",
    )
    run = sub.add_parser("run", help="run the check on the GPU host")
    run.add_argument("--pair", default="en_en-XB")
    run.add_argument("--out", type=Path, default=PROJECT_ROOT / "var" / "gpu-check.json")
    run.add_argument(
        "--cuda13-as-12",
        type=Path,
        default=None,
        metavar="LIBDIR",
        help="expose CUDA 13's cuBLAS in LIBDIR under CUDA 12's names (measuring only)",
    )
    args = parser.parse_args(argv)
    if args.what == "wheels":
        download_wheels(args.dest, tuple(args.skip))
        return 0
    report = run_checks(args.pair, args.cuda13_as_12)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(
        f"wrote {args.out}: "
        + ", ".join(f"{s['step']} {'ok' if s['ok'] else 'failed'}" for s in report["steps"])
    )
    return 0 if any(s["ok"] for s in report["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
