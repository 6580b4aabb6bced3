# Two commands from clone to running: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test demo bench lint typecheck clean

install: $(STAMP)

# Reinstall when the packaging or the API changes (stubs are generated then).
$(STAMP): pyproject.toml setup.py $(wildcard proto/jouled/v1/*.proto)
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "joule-bench needs Python 3.11 or newer")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel grpcio-tools
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: install
	$(BIN)/python -m pytest

demo: install
	$(BIN)/python -m jb_client.demo

bench: install
	$(BIN)/python bench/run_all.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info jouled/v1/*_pb2*.py jouled/v1/*_pb2*.pyi
