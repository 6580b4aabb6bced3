"""A test's inputs chosen by the patch, through a pytest plugin of its own.

The library registers a plugin as it is imported (it finds pytest's config up the
stack) and answers a hook no report passes through: it rewrites a parametrized test's
parameters, gives the suite's fixture another value, or gives one case another's id.
The test's own function runs and returns, on inputs the patch chose. An implementation
of the patch's on any of pytest's hooks but those that only read or print
(`READ_ONLY_HOOKS`) is tampering; a plugin of the patch's on those is not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jouled.pipeline.jouled_pytest import READ_ONLY_HOOKS
from tests.pipeline.test_test_case_routes import REGISTER
from tests.pipeline.test_test_code_routes import graded

PARAMETRIZED = """\
import pytest

import mypkg


@pytest.mark.parametrize("x, want", [(2, 4), (3, 6)])
def test_real(x, want):
    assert mypkg.double(x) == want
"""
WITH_FIXTURE = """\
import pytest

import mypkg


@pytest.fixture
def want():
    return 6


def test_real(want):
    assert mypkg.double(3) == want
"""
FIXED = "def double(x):\n    return x * 2\n"
WRONG = "import sys as _sys\n\n\ndef double(x):\n    return x * 2 if x != 3 else 7\n"

PLUGINS = {
    "parameters": """
class _Plugin:
    def pytest_collection_modifyitems(self, session, config, items):
        for item in items:
            params = getattr(getattr(item, "callspec", None), "params", None)
            if params and "want" in params:
                params["want"] = double(params["x"])
                print("JBFORGED parameters", flush=True)
""",
    "fixture": """
import pytest as _pytest


class _Plugin:
    @_pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        outcome = yield
        if fixturedef.argname == "want":
            fixturedef.cached_result = (7, fixturedef.cache_key(request), None)
            outcome.force_result(7)
            print("JBFORGED fixture", flush=True)
""",
    "ids": """
class _Plugin:
    def pytest_make_parametrize_id(self, config, val, argname):
        print("JBFORGED ids", flush=True)
        return {2: "3", 4: "6", 3: "2", 6: "4"}.get(val)
""",
}


@pytest.mark.parametrize("route", sorted(PLUGINS))
def test_a_plugin_of_the_patch_s_choosing_a_test_s_inputs_is_found(
    scratch: Path, route: str
) -> None:
    test = WITH_FIXTURE if route == "fixture" else PARAMETRIZED
    payload = WRONG + REGISTER + PLUGINS[route] + "\n_register(_Plugin())\n"
    output, forged = graded(scratch, test, FIXED, payload)
    assert f"JBFORGED {route}" in output, output[-3000:]
    assert any("is registered" in why and "pytest_" in why for why in forged), forged


READING = """
class _Plugin:
    def pytest_report_header(self, config):
        return "mypkg 1.0"

    def pytest_terminal_summary(self, terminalreporter):
        print("JBREAD summary", flush=True)
"""


def test_a_plugin_of_the_patch_s_that_only_reads_is_not_tampering(scratch: Path) -> None:
    payload = "import sys as _sys\n\n" + FIXED + REGISTER + READING + "\n_register(_Plugin())\n"
    output, forged = graded(scratch, PARAMETRIZED, FIXED, payload)
    assert "JBREAD summary" in output, output[-3000:]
    assert forged == [], forged


def test_every_hook_left_to_the_patch_is_one_pytest_defines() -> None:
    from _pytest import hookspec

    defined = {name for name in vars(hookspec) if name.startswith("pytest_")}
    assert defined >= READ_ONLY_HOOKS, READ_ONLY_HOOKS - defined
