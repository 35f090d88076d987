# Babel Stream — the two commands are `make demo` and `make test`; both set up
# everything they need on a fresh machine (virtualenv, Python deps, Kafka jars
# via Maven, Redis from Debian, the local stack).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TRAIN_VENV := .venv-train

.PHONY: install system-deps vendor up down status test test-unit test-integration test-loaded test-chaos test-bench demo gpu-runtime gpu-wheels gpu-check lint docs docs-serve train-env build-demo bench clean

install: $(STAMP) system-deps

# Debian's chromium (dashboard browser test), docker-compose v1 (checks
# docker-compose.yml without an engine) and prometheus (its promtool checks and
# unit-tests the alert rules). Installed as root when missing; otherwise those
# tests skip and say why.
system-deps:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 \
		|| missing="$$missing docker-compose"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "apt-get install$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
		else \
			echo "warning: not root or no apt-get; install$$missing for the browser/compose/alert-rule tests"; \
		fi; \
	fi

# Chart.js for the dashboard, pinned in package.json / package-lock.json and
# copied into the package (committed), so nothing comes from a CDN at run time.
vendor:
	npm ci --no-audit --no-fund
	cp node_modules/chart.js/dist/chart.umd.min.js pipeline/sla/dashboard/static/vendor/chart.umd.min.js
	cp node_modules/chart.js/LICENSE.md pipeline/sla/dashboard/static/vendor/chart.js.LICENSE.md

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

up: install
	$(BIN)/babelstream up

down:
	@if [ -x $(BIN)/babelstream ]; then $(BIN)/babelstream down; fi

status: install
	$(BIN)/babelstream status

# Unit tests need no services and run in parallel (pytest-xdist, one process a core);
# integration tests share the one stack `up` starts and run one after the other.
# PYTEST_ARGS: extra pytest options (CI asks for the slowest tests' durations).
PYTEST_ARGS ?=
UNIT_WORKERS ?= auto
test: install up
	$(BIN)/pytest -m "not integration" -n $(UNIT_WORKERS) $(PYTEST_ARGS)
	$(BIN)/pytest -m integration $(PYTEST_ARGS)

test-unit: install
	$(BIN)/pytest -m "not integration" -n $(UNIT_WORKERS) $(PYTEST_ARGS)

test-integration: install up
	$(BIN)/pytest -m integration $(PYTEST_ARGS)

# The integration suite while spinning processes keep BURN_CORES cores busy, as on a
# shared CI machine: its tests control timing instead of racing the clock, so they pass.
BURN_CORES ?= 1
test-loaded: install up
	$(BIN)/pytest -m integration --burn-cores $(BURN_CORES) $(PYTEST_ARGS)

# The chaos suite: a 3-broker cluster and workers of its own (beside the stack `up`
# starts), one fault per scenario under paced traffic, every request reconciled;
# reports appended to var/chaos/report.jsonl.
test-chaos: install
	$(BIN)/pytest -m chaos $(PYTEST_ARGS)

# Every `babelstream bench` command as a user types it, each at its smallest size
# (bench.scale=0.01), on a stack of its own: a bench that crashes with its defaults.
test-bench: install
	$(BIN)/pytest -m bench $(PYTEST_ARGS)

demo: install up
	$(BIN)/python -m pipeline.cli.demo

# GPU hosts: CUDA 12's cuBLAS for CTranslate2 (the `gpu` extra), checked at once.
gpu-runtime: install
	$(BIN)/pip install -q -e '.[gpu]'
	$(BIN)/python -c "from pipeline.engine.gpu_runtime import load_cublas; s = load_cublas(); print('cuBLAS 12:', s.loaded_from or s.problem)"

# A GPU host without a package registry. Here (with one): the wheels it needs, for
# Python 3.12 on Linux x86-64, into .whl/ (GPU_WHEELS_ARGS="--skip NAME" leaves out what
# it has). There: install from .whl/ alone and run the check, one JSON report in
# var/gpu-check.json (GPU_CHECK_ARGS: --pair, --cuda13-as-12 LIBDIR).
GPU_PYTHON ?= python3.12
gpu-wheels: install
	$(BIN)/python -m pipeline.bench.gpu_check wheels $(GPU_WHEELS_ARGS)

gpu-check:
	@test -x .venv-gpu/bin/python || $(GPU_PYTHON) -m venv .venv-gpu
	.venv-gpu/bin/pip install -q --no-index --find-links .whl -r .whl/requirements.txt
	.venv-gpu/bin/pip install -q --no-index --no-deps --no-build-isolation -e .
	.venv-gpu/bin/python -m pipeline.bench.gpu_check run $(GPU_CHECK_ARGS)

# This release's performance figures (each bench a few minutes; docs/performance/index.md).
BENCH_PAIR ?= en_en-XB
bench: install up
	@test -f var/models/bench/registry.toml || $(BIN)/babelstream models build-bench
	$(BIN)/babelstream bench engine --pair $(BENCH_PAIR) --json
	$(BIN)/babelstream bench compare --pair $(BENCH_PAIR) --json
	$(BIN)/babelstream bench curve --pair $(BENCH_PAIR) --json
	$(BIN)/babelstream bench interference --pair $(BENCH_PAIR) --json
	$(BIN)/babelstream bench adaptive --pair $(BENCH_PAIR) --json
	$(BIN)/babelstream bench sla --json

# Style, formatting and strict typing (CI runs this before the tests).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The documentation site (mkdocs.yml), its reference generated from the code at build
# time (docsgen/); strict: a broken link or anchor fails. Output: var/site/.
DOCS_ADDR ?= 127.0.0.1:8000
# NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor, not about this site
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr $(DOCS_ADDR)

# Dev-only: PyTorch + transformers to rebuild the bundled demo model.
train-env:
	@test -x $(TRAIN_VENV)/bin/python || $(PYTHON) -m venv $(TRAIN_VENV)
	$(TRAIN_VENV)/bin/pip install -q --upgrade pip
	$(TRAIN_VENV)/bin/pip install -q -e '.[train]' --no-deps
	$(TRAIN_VENV)/bin/pip install -q torch transformers sentencepiece==0.2.3 sacrebleu==2.6.0 ctranslate2==4.8.5 tqdm numpy

build-demo: install train-env
	$(BIN)/babelstream models build-demo

clean: down
	rm -rf var
