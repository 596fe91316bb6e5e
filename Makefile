# make test   : create .venv if missing, install gns-jax with its test extra, lint, run the tests
# make train  : create .venv if missing, install, train on a shipped real dataset (CPU is fine)
# make test-slow : the tests marked slow, each over ~10 s (.ci/run runs it after make test)
# make test-notebooks : run the teaching notebooks headlessly (.ci/run runs it after make test)
# make test-parallel : multi-device training on forced CPU devices (.ci/run runs it after make test)
# make notebooks : rebuild notebooks/*.ipynb from notebooks/src/*.py, outputs included
# make theory : the numerical checks of gns_jax/theory/ in the report setting; rewrites its
#               README.md and figures/, and its run's JSON (full-run.json.xz)
# make peers  : optional peer environment .venv-peers (CPU PyTorch, PyG, torch-sparse from source)
#               for experiments/bench_epoch.py --pyg; never part of make test (about 15 min)
PYTHON ?= python3
TORCH_INDEX ?=  # e.g. https://download.pytorch.org/whl/cpu where no CPU torch wheel is local
PEERS  := .venv-peers
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-slow test-parallel test-notebooks notebooks train theory peers lint format clean

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

test-parallel: $(STAMP)
	$(BIN)/python -m pytest -q -m parallel

test-notebooks: $(STAMP)
	$(BIN)/python -m pytest -q -m notebooks

notebooks: $(STAMP)
	$(BIN)/python notebooks/build.py

train: $(STAMP)
	$(BIN)/gns-jax train --dataset cora --out results-cora.json

theory: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,theory]'
	$(BIN)/python -m gns_jax.theory --full --json gns_jax/theory/full-run.json.xz

peers: $(PEERS)/.installed

$(PEERS)/.installed: pyproject.toml
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet --upgrade pip setuptools wheel
	$(PEERS)/bin/python -m pip install --quiet torch==2.13.0 \
		$(if $(strip $(TORCH_INDEX)),--extra-index-url $(TORCH_INDEX))
	$(PEERS)/bin/python -m pip install --quiet torch_geometric==2.8.1
	MAX_JOBS=2 $(PEERS)/bin/python -m pip install --quiet --no-build-isolation \
		--no-binary torch-scatter,torch-sparse torch-scatter torch-sparse
	$(PEERS)/bin/python -m pip install --quiet -e .
	touch $@

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) $(PEERS) .pytest_cache .ruff_cache *.egg-info
