# facet: `make demo` runs the product on this machine; `make test` installs what is needed and runs the tests.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
# pip's and setuptools' output (deprecation banners included) goes here; a failure shows its tail.
LOGS := $(or $(FACET_DATA_DIR),var)/logs
INSTALL_LOG := $(LOGS)/install.log

.PHONY: install system-deps demo demo-cassette serve test test-fast worker bench clean-data screenshots

$(STAMP): pyproject.toml
	@mkdir -p $(LOGS)
	@echo "Install: Python packages into $(VENV) (a few minutes the first time; log $(INSTALL_LOG)) ..."
	@{ { test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); } \
	  && $(BIN)/pip install -q --upgrade pip setuptools wheel \
	  && $(BIN)/pip install -q -e '.[test]' --config-settings editable_mode=compat; } >>$(INSTALL_LOG) 2>&1 \
	  || { tail -n 25 $(INSTALL_LOG); echo "Install failed; the whole output is in $(INSTALL_LOG)."; exit 1; }
	@rm -f $(VENV)/.installed-*
	@touch $@

install: $(STAMP)

# Debian packages the tests and the demo use (chromium for browser tests, the Docker Engine and
# debootstrap for the execution backend). Installs only what is missing; needs root.
system-deps:
	@bash scripts/install-system-deps

# The whole pipeline on bundled data (docs/demo.md), then the site with a worker (facet serve), so
# that jobs started in the browser run; Ctrl-C stops both. A second run reuses everything.
demo: install
	@$(BIN)/facet migrate --noinput -v 0
	@$(BIN)/facet demo
	@$(BIN)/facet serve 127.0.0.1:8000

# Re-record scenarios/fixtures/demo.cassette.jsonl (synthesis, construction and the rollout turns of
# the demo run, from demo/scripted_llm.py, against the Docker Engine); docs/demo.md, "Recording".
# `make demo-cassette ARGS=--rollouts-only` re-records only the rollout turns.
demo-cassette: install
	$(BIN)/python scripts/record-demo-cassette $(ARGS)

# The site and a Celery worker with beat beside it; Ctrl-C stops both.
serve: install
	@$(BIN)/facet migrate --noinput -v 0
	@$(BIN)/facet serve 127.0.0.1:8000

worker: install
	$(BIN)/facet worker

test: install system-deps
	$(BIN)/python -m pytest

test-fast: install
	$(BIN)/python -m pytest -m "not docker and not browser"

# PNGs of the main pages at 1280 and 1920 px for reviewers of the UI, from the layout test's
# seeded data (tests/browser/test_layout.py), in var/screenshots (FACET_DATA_DIR/screenshots).
screenshots: install
	FACET_SCREENSHOTS=$(abspath $(or $(FACET_DATA_DIR),var))/screenshots $(BIN)/python -m pytest \
	  tests/browser/test_layout.py -q -p no:cacheprovider
	@echo "Screenshots: $(abspath $(or $(FACET_DATA_DIR),var))/screenshots"

bench: install
	$(BIN)/python bench/ingest.py

clean-data:
	rm -rf var/
