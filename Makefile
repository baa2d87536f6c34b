# facet: `make demo` runs the product on this machine; `make test` installs what is needed and runs the tests.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: install system-deps demo demo-cassette serve test test-fast worker bench clean-data

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q -e '.[test]' --config-settings editable_mode=compat
	@rm -f $(VENV)/.installed-*
	@touch $@

install: $(STAMP)

# Debian packages the tests and the demo use (chromium for browser tests, the Docker Engine and
# debootstrap for the execution backend). Installs only what is missing; needs root.
system-deps:
	@bash scripts/install-system-deps

# The whole pipeline on bundled data (docs/demo.md), then the site. A second run reuses everything.
demo: install
	$(BIN)/facet migrate --noinput
	$(BIN)/facet demo
	$(BIN)/facet runserver 127.0.0.1:8000

# Re-record scenarios/fixtures/demo.cassette.jsonl (synthesis, construction and the rollout turns of
# the demo run, from demo/scripted_llm.py, against the Docker Engine); docs/demo.md, "Recording".
# `make demo-cassette ARGS=--rollouts-only` re-records only the rollout turns.
demo-cassette: install
	$(BIN)/python scripts/record-demo-cassette $(ARGS)

serve: install
	$(BIN)/facet runserver 127.0.0.1:8000

worker: install
	$(BIN)/facet worker

test: install system-deps
	$(BIN)/python -m pytest

test-fast: install
	$(BIN)/python -m pytest -m "not docker and not browser"

bench: install
	$(BIN)/python bench/ingest.py

clean-data:
	rm -rf var/
