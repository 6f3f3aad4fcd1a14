# shmkafka — the two entry points are `make test` and `make demo`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-test

.PHONY: test lint typecheck unit demo bench bench-append bench-e2e bench-broker-stub clean

$(STAMP): pyproject.toml hatch_build.py producer/shmkafka/producer/_fastappend.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

test: $(STAMP) lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -n auto

demo:
	@echo "make demo arrives with the perf issue (issue 7): the multi-process perf run on broker_stub."
	@echo "Until then: make bench runs the codec benchmark."
	@exit 1

bench: $(STAMP)
	$(BIN)/python perf/bench_codec.py

bench-append: $(STAMP)
	$(BIN)/python perf/bench_append.py

bench-e2e: $(STAMP)
	$(BIN)/python perf/bench_e2e.py

bench-broker-stub: $(STAMP)
	$(BIN)/python perf/bench_broker_stub.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
