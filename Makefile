# privrl — one-command set-up: every target creates .venv and installs the package when needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test test-slow lint format bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/privrl demo --out runs/demo

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check src reproductions tests benchmarks
	$(VENV)/bin/ruff format --check src reproductions tests benchmarks
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
