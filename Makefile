# make test   : create .venv if missing, install gns-jax with its test extra, lint, run the tests
# make train  : create .venv if missing, install, train on a shipped real dataset (CPU is fine)
# make theory : the numerical checks of theory/ in the report setting; rewrites theory/README.md
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-slow train theory lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

train: $(STAMP)
	$(BIN)/gns-jax train --dataset cora --out results-cora.json

theory: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,theory]'
	$(BIN)/python -m theory --full

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
