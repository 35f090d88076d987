"""MkDocs hook (``mkdocs.yml``: ``hooks``): adds the generated reference pages to the build."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

# mkdocs loads this file by path; the project root makes ``docsgen`` and ``pipeline`` importable
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mkdocs.structure.files import File, Files

from docsgen.reference import PAGES

# kafka-python's protocol tables use importlib.resources' legacy API (as in pytest's filters)
for _legacy in ("read_text", "open_text"):
    warnings.filterwarnings("ignore", f"{_legacy} is deprecated", DeprecationWarning)


def on_files(files: Files, config: Any) -> Files:
    """Generate every reference page afresh, from the code as it is now."""
    for path, generate in PAGES.items():
        files.append(File.generated(config, path, content=generate()))
    return files
