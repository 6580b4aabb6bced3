"""Introspection a library of the environment makes itself, and the same steered by the
patch into a library's code.

Hypothesis weighs its own `Random`'s referrers with `gc.get_referrers`, which the monitor
refuses to the patch (it finds pytest's Config, the runner's objects, through it): a
property test's run must not read as tampering (`test_swallowing_wrappers.py` runs
hypothesis's property tests for real). The same function run by pytest's own
code, as a finalizer the patch's library gave the running test (a partial over `map`, so
no frame of the patch's is on the stack when it runs), is still refused.
"""

from __future__ import annotations

from pathlib import Path

from tests.pipeline.test_test_code_routes import graded

TEST = "import mypkg\n\n\ndef test_v():\n    assert mypkg.value() == 1\n"
STEERED = """
import functools as _functools
import gc as _gc
import sys as _sys

_found = []


def value():
    frame = _sys._getframe(1)
    while frame is not None:
        item = frame.f_locals.get("item")
        if item is not None and hasattr(item, "addfinalizer"):
            config = item.config
            item.addfinalizer(_functools.partial(_found.extend, map(_gc.get_referrers, [config])))
            print("JBFORGED finalizer given", flush=True)
            break
        frame = frame.f_back
    return 1
"""


def test_introspection_steered_into_the_framework_s_own_code_is_refused(scratch: Path) -> None:
    output, forged = graded(scratch, TEST, "def value():\n    return 1\n", STEERED)
    assert "JBFORGED finalizer given" in output, output
    assert any("gc.get_referrers was called from" in why for why in forged), forged
