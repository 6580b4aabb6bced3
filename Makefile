# Two commands from clone to running: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test browser demo bench lint typecheck clean

install: $(STAMP)

# Reinstall when the packaging or the API changes (stubs are generated then).
$(STAMP): pyproject.toml setup.py $(wildcard proto/jouled/v1/*.proto)
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "joule-bench needs Python 3.11 or newer")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel grpcio-tools
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: install browser
	$(BIN)/python -m pytest

# The report's test renders its page in Debian's chromium. Installed only where that
# is safe to do unattended (root, apt-get present); elsewhere the test skips.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || echo "chromium not installed: the report's browser test will skip"; }

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
