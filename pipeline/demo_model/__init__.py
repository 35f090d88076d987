"""The bundled demo model: how it is built, trained and checked.

One small character-level Transformer serves two pairs through target-language
prefix tokens: ``en_en-XA`` (English to the en-XA pseudo-locale) and
``en-XA_en`` (the inverse). ``babelstream models build-demo`` generates the
training sentences, trains the model (PyTorch + transformers, from the
``train`` extra in ``.venv-train``), converts it to CTranslate2 INT8 and
writes ``models/demo/``; ``babelstream models eval-demo`` measures chrF on
held-out sentences through the real serving path.

Only ``build.py``/``train.py`` import PyTorch; nothing here is imported by the
serving path except the constants below.
"""

from __future__ import annotations

from pathlib import Path

# Not pipeline.settings: this package must import in .venv-train, which lacks pydantic.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEMO_DIR = PROJECT_ROOT / "models" / "demo"
DEMO_MODEL_ID = "babelstream-demo-enxa"
SPM_FILE = "spm.model"
LANG_TOKENS: dict[str, str] = {"en": ">>en<<", "en-XA": ">>en-XA<<"}
DEMO_PAIRS: tuple[str, ...] = ("en_en-XA", "en-XA_en")
# Trained on sentences of up to ~45 words (~350 characters): longer input is
# split before it reaches the model, and decoding stays inside its 1024 positions.
MAX_INPUT_TOKENS = 400
MAX_OUTPUT_TOKENS = 1000
