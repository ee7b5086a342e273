# modelhooks — one target per habit. Every target installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
HASH   := $(shell cksum pyproject.toml | cut -d' ' -f1)
RUNTIME := $(VENV)/.runtime-$(HASH)
STAMP  := $(VENV)/.installed-$(HASH)
HOST   ?= 127.0.0.1
PORT   ?= 8080
PYTEST_ARGS ?=
RUN_ARGS ?=
# Test servers this machine cannot obtain; their tests are skipped naming the reason
# (tests/servers/recipes.py, KNOWN_BLOCKERS). zot: the Go module proxy refuses its module.
export MODELHOOKS_TEST_UNAVAILABLE ?= zot

IMAGE  ?= modelhooks:dev
CONTAINER ?= $(shell command -v podman || command -v docker)

.PHONY: help install run test unit servers lint fmt bench docs image sources clean

# `make help`: each `target: ## text` of this file, the variables in the text expanded by make
# ($(IMAGE) prints its value; eval does the second expansion, so a text holds no `#`)
help_text = $(eval _help := $(shell sed -n 's/^$(1):.*## //p' $(MAKEFILE_LIST)))$(subst ','\'',$(_help))
help:  ## list the targets
	@{ $(foreach t,$(shell sed -n 's/^\([a-z-]*\):.*## .*/\1/p' $(MAKEFILE_LIST)),\
	  printf '%s\t%s\n' $(t) '$(call help_text,$(t))';) } | expand -t 12

# `make run` installs modelhooks with every extra (all): what the README's demo uses (signing,
# model_signing's CLI, watch-models, gs:// and s3:// URIs); everything else also installs
# the dev tools.
$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	PYTHONWARNINGS=ignore $(PY) -m pip install --quiet -e '.[all]'
	rm -f $(VENV)/.runtime-* && touch $@

$(STAMP): $(RUNTIME)
	PYTHONWARNINGS=ignore $(PY) -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)  ## create .venv with modelhooks and its dev tools

run: $(RUNTIME)  ## serve every function on embedded defaults (state in ./.modelhooks)
	$(VENV)/bin/modelhooks serve --host $(HOST) --port $(PORT) $(RUN_ARGS)

servers: $(STAMP)  ## obtain, build and cache every real test server
	$(PY) -m tests.servers install

unit: $(STAMP)  ## the fast layer only (no servers)
	$(PY) -m pytest -m "not integration and not e2e" $(PYTEST_ARGS)

test: $(STAMP) servers  ## every layer: unit, integration and e2e against real servers
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff, mypy strict, and the layer contracts (import-linter)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m tests.tools.namespace_tree build/namespace >/dev/null
	$(VENV)/bin/mypy
	PYTHONPATH=build/namespace $(VENV)/bin/lint-imports

fmt: $(STAMP)  ## format the code
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

docs: $(STAMP)  ## regenerate README's settings table and events/schemas
	$(PY) -m tests.update_docs

bench: $(STAMP)  ## benchmarks, printed side by side with their anchors
	$(PY) -m tests.bench

image: $(STAMP)  ## build the container image (infra/image/Dockerfile) as $(IMAGE)
	$(PY) -m tests.tools.image_context build/image
	$(CONTAINER) build -f infra/image/Dockerfile -t $(IMAGE) build/image

sources: $(STAMP)  ## Cloud Run functions source folders, one per function, in build/functions
	$(PY) -m tests.tools.cloud_run_sources build/functions

clean:  ## remove the venv and local state
	rm -rf $(VENV) .modelhooks .pytest_cache .mypy_cache .ruff_cache build
