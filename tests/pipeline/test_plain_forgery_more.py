"""Forgeries of the plain runners' verdicts (SymPy's `bin/test`, unittest/Django) that the
daemon must sign `tampered` or `unresolved`: each library below leaves its bug in place and
tries to get the official log parser to read the failing test as passed while the runner's
authenticated channel agrees with the log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jouled.contracts import swebench_harness as harness
from jouled.pipeline import sympy_run
from tests.pipeline import test_sympy_run as sympy_case

release = sympy_case.release

# SymPy's `test_file` runs the functions of its `funcs` list in a loop; a library called by
# the failing test appends a test that already passed, renamed after the failing one. It
# runs again at the end of the file: the log's last `test_rotate` line is `ok` (the official
# parser keeps a name's last line) and so is the channel's last `test_rotate` record
# (`...::test_rotate#2`), while the bug stays.
SYMPY_RERUN = """
_jb_rotate_left = rotate_left
_jb_done = []


def rotate_left(x, y):
    if not _jb_done:
        import sys as _sys

        frame = _sys._getframe(1)
        while frame is not None and frame.f_code.co_name != "test_file":
            frame = frame.f_back
        funcs = frame.f_locals.get("funcs") if frame is not None else None
        for again in list(funcs or ()):
            if again.__name__ == "test_is_palindromic":
                again.__name__ = "test_rotate"
                funcs.append(again)
                _jb_done.append(again)
                print("JBFORGED queued", again.__code__.co_name, "as test_rotate")
                break
    return _jb_rotate_left(x, y)
"""


@pytest.mark.slow
def test_sympy_a_passed_test_rerun_under_the_failing_ones_name_is_caught(
    release: Path, scratch: Path
) -> None:
    library = (release / sympy_case.ITERABLES).read_text() + SYMPY_RERUN
    channel, output, exit_code, canaries = sympy_case.run(release, scratch, library)
    # The forgery ran: test_rotate failed, then a passing test ran again under its name.
    assert "JBFORGED queued test_is_palindromic as test_rotate" in output, output[-3000:]
    assert channel.outcomes[sympy_case.ROTATE] == "failed", channel.outcomes
    log = sympy_case.graded(output, canaries)
    others = [name for name, outcome in log.items() if outcome == "passed" and ".py:" not in name]
    official = harness.official_verdict("sympy", output, ["test_rotate"], others)
    why = sympy_run.disagreement(log, channel, exit_code, canaries)
    assert channel.forged or why or not official.resolved, (official, channel.outcomes)
