# make test   : create .venv if missing, install gns-jax with its test extra, lint, run the tests
# make train  : create .venv if missing, install, train on a shipped real dataset (CPU is fine)
# make test-slow : the tests marked slow, each over ~10 s (.ci/run runs it after make test)
# make test-notebooks : run the teaching notebooks headlessly (.ci/run runs it after make test)
# make test-parallel : multi-device training on forced CPU devices (.ci/run runs it after make test)
# make notebooks : rebuild notebooks/*.ipynb from notebooks/src/*.py, outputs included
# make docs   : the documentation site (mkdocs.yml, docs/), built strict into site/: a broken link,
#               figure or API reference fails it; installs the docs extra (.ci/run runs it)
# make theory : the numerical checks of gns_jax/theory/ in the report setting; rewrites its
#               README.md and figures/, and its run's JSON (full-run.json.xz)
# make peers  : optional peer environments for experiments/bench_epoch.py, never part of make test:
#               .venv-peers (CPU PyTorch, PyG, torch-sparse from source; about 15 min) for --pyg,
#               .venv-dgl (DGL 2.1.0, torch 2.1.2, NumPy 1; no gns-jax; about 2 min) for --dgl
PYTHON ?= python3
TORCH_INDEX ?=  # e.g. https://download.pytorch.org/whl/cpu where no CPU torch wheel is local
PEERS  := .venv-peers
DGL    := .venv-dgl
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: install test test-slow test-parallel test-notebooks notebooks train theory docs peers lint \
	format clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py $(wildcard native/*.cc native/*.h)
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

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@

# NO_MKDOCS_2_WARNING: mkdocs-material's notice about MkDocs 2.0 on every build
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --clean --site-dir site

peers: $(PEERS)/.installed $(DGL)/.installed

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

# DGL 2.1 builds against torch < 2.3, which needs NumPy 1 and this project's JAX needs NumPy 2: so
# DGL has a venv of its own, without gns-jax; experiments/dgl_side.py runs in it as a subprocess.
# dgl 2.1.0 imports pandas, yaml and pydantic (graphbolt) though its wheel does not require them.
# PyPI's torch 2.1.2 for Linux is the CUDA build (about 2.5 GB of nvidia-* wheels; it runs on a
# CPU); TORCH_INDEX=https://download.pytorch.org/whl/cpu gets the CPU-only 2.1.2+cpu instead.
$(DGL)/.installed:
	test -x $(DGL)/bin/python || $(PYTHON) -m venv $(DGL)
	$(DGL)/bin/python -m pip install --quiet --upgrade pip
	$(DGL)/bin/python -m pip install --quiet torch==2.1.2 torchdata==0.7.1 dgl==2.1.0 'numpy<2' \
		pandas==3.0.6 pyyaml==6.0.4 pydantic==2.14.4 \
		$(if $(strip $(TORCH_INDEX)),--extra-index-url $(TORCH_INDEX))
	DGLBACKEND=pytorch $(DGL)/bin/python -c \
		'import dgl, dgl.dataloading, dgl.nn; dgl.dataloading.NeighborSampler; dgl.nn.SAGEConv'
	touch $@

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) $(PEERS) $(DGL) .pytest_cache .ruff_cache *.egg-info
