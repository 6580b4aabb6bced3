# Two commands from clone to running: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-slow browser swebench-fixtures demo bench lint typecheck clean

install: $(STAMP)

# Reinstall when the packaging or the API changes (stubs are generated then).
$(STAMP): pyproject.toml setup.py $(wildcard proto/jouled/v1/*.proto)
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "joule-bench needs Python 3.11 or newer")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel grpcio-tools
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Test files are spread over WORKERS processes (one per core by default); a file stays on
# one worker, so the daemon or environment its tests share is started or built once.
# `make test` leaves out the tests marked slow (real releases built into environments);
# `make test-slow` runs only those. CI runs both.
WORKERS ?= auto
PYTEST  := $(BIN)/python -m pytest -n $(WORKERS) --dist loadfile

test: install browser swebench-fixtures
	$(PYTEST) -m "not slow"

test-slow: install browser swebench-fixtures
	$(PYTEST) -m slow

# The report's test renders its page in Debian's chromium. Installed only where that
# is safe to do unattended (root, apt-get present); elsewhere the test skips.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || echo "chromium not installed: the report's browser test will skip"; }

# The SWE-bench tests grade instances built from real releases (Django, Flask, pytest,
# SymPy) in environments built offline from these files, and hold jouled's parsing and grading
# to the official swebench package's (unpacked without its dependencies: see
# tools/swebench_oracle.py). Fetched once into .cache/swebench/; where they cannot
# be fetched, those tests skip and say so.
SWE_CACHE    := .cache/swebench
SWE_STAMP    := $(SWE_CACHE)/.fetched-9
SWE_SDISTS   := django==5.0.14 flask==2.3.3 pytest==8.0.2 MarkupSafe==2.1.1 sympy==1.12
SWE_WHEELS   := asgiref==3.8.1 sqlparse==0.5.3 click==8.1.3 itsdangerous==2.1.2 Jinja2==3.1.2 \
                Werkzeug==2.3.7 blinker==1.9.0 setuptools==70.0.0 wheel==0.45.1 flit_core==3.9.0 \
                pytest==8.3.4 iniconfig==2.0.0 packaging==24.2 pluggy==1.5.0 setuptools-scm==8.1.0 \
                sympy==1.12 mpmath==1.3.0 flake8==7.1.1 pyflakes==3.2.0 pycodestyle==2.12.1 \
                mccabe==0.7.0 flake8-comprehensions==3.16.0
# pytest-dev/pytest's specification pins these (pip downloads one version of a name at a time)
SWE_PINNED   := packaging==23.1 pluggy==1.3.0 exceptiongroup==1.1.3 tomli==2.0.1
SWE_ORACLE   := swebench==4.1.0
# A real library that loads ctypes at import, for the graded run that withholds it
# (tests/pipeline/test_real_numpy.py); a wheel for this interpreter where one exists
REAL_NUMPY   := "numpy>=1.26,<2.4"
# The releases the real Verified instances' checkouts are rebuilt from (tests/swebench_verified.py),
# one download each: two versions of one name cannot share a pip call. pip reads an sdist's
# metadata by running its build, so only the sdist itself is taken as source (its build
# dependencies as wheels: from source, astropy's would compile NumPy), and under setuptools<70
# (astropy 5.2's setup imports setuptools.dep_util, which later releases removed)
SWE_VERIFIED := flask==2.2.3 pytest==7.1.2 sphinx==3.4.3 sympy==1.2 sympy==1.1.1 \
                django==3.2a1 django==4.0a1 django==4.1a1 django==4.2a1 astropy==5.2
SWE_BUILD_PINS := setuptools<70

swebench-fixtures: install
	@test -f $(SWE_STAMP) || { \
	  rm -rf $(SWE_CACHE)/dist $(SWE_CACHE)/oracle && mkdir -p $(SWE_CACHE)/dist $(SWE_CACHE)/oracle && \
	  $(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps \
	    --no-binary :all: -d $(SWE_CACHE)/dist $(SWE_SDISTS) && \
	  $(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps \
	    --only-binary :all: -d $(SWE_CACHE)/dist $(SWE_WHEELS) && \
	  $(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps \
	    --only-binary :all: -d $(SWE_CACHE)/dist $(SWE_PINNED) && \
	  $(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps \
	    -d $(SWE_CACHE) $(SWE_ORACLE) && \
	  printf '%s\n' '$(SWE_BUILD_PINS)' > $(SWE_CACHE)/build-constraints.txt && \
	  ( for req in $(SWE_VERIFIED); do PIP_BUILD_CONSTRAINT=$(SWE_CACHE)/build-constraints.txt \
	    $(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps \
	    --no-binary $${req%%==*} -d $(SWE_CACHE)/dist $$req || exit 1; done ) && \
	  $(BIN)/python -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
	    $(SWE_CACHE)/swebench-4.1.0-py3-none-any.whl $(SWE_CACHE)/oracle && \
	  ( $(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps \
	    --only-binary :all: -d $(SWE_CACHE)/dist $(REAL_NUMPY) \
	    || echo "no NumPy wheel for this interpreter: the real-NumPy run will skip" ) && \
	  touch $(SWE_STAMP); } \
	  || echo "SWE-bench fixtures not fetched: the real-release SWE-bench tests will skip"

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
