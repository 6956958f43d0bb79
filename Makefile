# The two commands of the README:
#   make demo   install, then pretrain a tiny ALBERT on the embedded demo corpus and fine-tune it
#               on a paraphrase task made from the same text, then predict on new pairs
#               (offline, CPU)
#   make test   install with the test extra, then run the test suite (two workers, one file each:
#               module fixtures stay in one process, the longest files first; 12 min 25 s of
#               pytest in a fresh clone, 1,788 tests, on an idle 2-core box; `pytest -m "not slow"
#               -n 2 --dist loadfile tests` is the inner loop, 2 min 53 s there;
#               benchmarks/RESULTS.md has the times)
#   make lint   install with the test extra (it holds the lint extra's pins), then ruff and mypy
#               over albert_jax/, launch/, configs/ (and ruff over tests/); CI runs it first
PYTHON ?= python3
VENV ?= .venv
DEMO_CONFIG ?= configs/pretrain.py:runlocal
DEMO_WORKDIR ?= runs/demo

.PHONY: demo test lint install postgresql

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-core: setup.cfg pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: setup.cfg pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	touch $@ $(VENV)/.installed-core

install: $(VENV)/.installed-core

demo: $(VENV)/.installed-core
	$(VENV)/bin/albert-jax tokenizer train --config=$(DEMO_CONFIG)
	$(VENV)/bin/albert-jax data build --config=$(DEMO_CONFIG)
	$(VENV)/bin/albert-jax pretrain --config=$(DEMO_CONFIG) --workdir=$(DEMO_WORKDIR)
	$(VENV)/bin/python -m albert_jax.finetune.demo --pretrained=$(DEMO_WORKDIR) \
		--workdir=$(DEMO_WORKDIR)-paraphrase
	$(VENV)/bin/albert-jax predict --workdir=$(DEMO_WORKDIR)-paraphrase/pretrained \
		--input=$(DEMO_WORKDIR)-paraphrase/new_pairs.jsonl --output=-

# The sweep tests start a PostgreSQL server on 127.0.0.1 (tests/postgres_server.py); pip cannot
# install one, so Debian's is installed where initdb is missing (as root, or through sudo).
postgresql:
	@if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		sudo_=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$sudo_ apt-get update -q && \
		$$sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql; \
	fi

test: $(VENV)/.installed-test postgresql
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadfile tests

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check albert_jax launch configs tests
	$(VENV)/bin/mypy
