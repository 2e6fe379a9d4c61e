# privrl — one-command set-up: every target creates .venv and installs the package when needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test test-slow lint format docs bench clean

# constraints.txt pins what CI tests (torch 2.13.0, the CPU wheel) within pyproject's ranges.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/privrl demo --out runs/demo

# The default suite runs on every core (pytest-xdist; PYTEST_WORKERS=0 runs it in one process).
PYTEST_WORKERS ?= auto

test: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check src reproductions tests benchmarks examples
	$(VENV)/bin/ruff format --check src reproductions tests benchmarks examples
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff format src reproductions tests benchmarks examples
	$(VENV)/bin/ruff check --fix src reproductions tests benchmarks examples

# The documentation site (mkdocs.yml) into site/; --strict fails on a broken link or docstring.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache
