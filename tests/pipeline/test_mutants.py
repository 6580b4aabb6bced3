"""The sealed test modules a resolved attempt is graded on again: values changed, nothing else."""

from __future__ import annotations

import ast
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest

from jouled.pipeline.mutants import defined_names, mutants, mutate

MODULE = b"""\
import pytest
from calc import double, name

LIMIT = 42


def test_double():
    assert double(21) == 42
    assert double(0) == 0


def test_flipped():
    x = double(21)
    assert 42 == x


def test_text():
    assert name("x") == "Abc9"


class TestCase:
    def test_equal(self):
        self.assertEqual(double(4), 8)

    @pytest.mark.parametrize("a", [1, 2])
    def test_marked(self, a):
        assert double(a) == 2


def test_may_return_first():
    if double(1) == 2:
        return
    assert double(3) == 6


def test_in_a_loop_only():
    for x in (1, 2):
        assert double(x) == 7


def test_nothing_compared():
    assert double(1)
"""


def shape(text: bytes) -> str:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            node.value = type(node.value).__name__
    return ast.dump(tree)


def changed_lines(before: bytes, after: bytes) -> dict[int, tuple[str, str]]:
    pairs = zip(before.decode().splitlines(), after.decode().splitlines(), strict=True)
    return {n: (a, b) for n, (a, b) in enumerate(pairs, 1) if a != b}


def test_each_compared_value_changes_and_nothing_else_does() -> None:
    mutant = mutate(MODULE, random.Random(7))
    assert mutant is not None
    changed = changed_lines(MODULE, mutant.text)
    lines = MODULE.decode().splitlines()
    # Only assertion lines change, and only in literals: read with every literal's value
    # as its kind, the two modules are the same.
    for old, _ in changed.values():
        assert old.lstrip().startswith(("assert", "self.assertEqual")), old
    assert shape(mutant.text) == shape(MODULE)
    untouched = [n for n, line in enumerate(lines, 1) if "LIMIT = 42" in line or "def " in line]
    assert not set(untouched) & set(changed)
    # Every test's first top-level comparison reached for sure must fail on the mutant.
    assert mutant.must_fail == {
        "test_double",
        "test_flipped",
        "test_text",
        "TestCase::test_equal",
        "TestCase::test_marked",
    }
    # A value compared twice becomes the same other value throughout.
    new_42 = {new.split("==")[1].strip() for old, new in changed.values() if "== 42" in old}
    new_42 |= {new.split("==")[0].split()[-1] for old, new in changed.values() if "42 ==" in old}
    assert len(new_42) == 1 and new_42 != {"42"}


def test_a_changed_value_is_plausible_a_count_stays_a_count_a_string_keeps_its_shape() -> None:
    for seed in range(200):
        mutant = mutate(MODULE, random.Random(seed))
        assert mutant is not None
        for old, new in changed_lines(MODULE, mutant.text).values():
            if "name(" in old:
                before, after = (
                    ast.literal_eval(old.split("== ")[1]),
                    ast.literal_eval(new.split("== ")[1]),
                )
                assert len(after) == len(before) and after != before
                assert sum(a != b for a, b in zip(before, after, strict=True)) == 1
                for a, b in zip(before, after, strict=True):
                    assert (a.isdigit(), a.isupper()) == (b.isdigit(), b.isupper())
            elif "== 0" in old:
                assert int(new.split("== ")[1]) > 0


def test_the_pytest_ids_that_must_fail_are_those_of_changed_tests() -> None:
    mutant = mutate(MODULE, random.Random(1))
    assert mutant is not None
    ids = [
        "tests/test_m.py::test_double",
        "tests/test_m.py::TestCase::test_marked[1]",
        "tests/test_m.py::test_may_return_first",
        "tests/other.py::test_double",
    ]
    assert mutant.failing_ids("tests/test_m.py", ids, lambda name: False) == ids[:2]


def test_unittest_ids_name_the_module_by_its_dotted_path() -> None:
    mutant = mutate(MODULE, random.Random(1))
    assert mutant is not None
    ids = [
        "test_equal (utils_tests.test_m.TestCase)",
        "test_equal (utils_tests.test_m.TestCase.test_equal)",  # Python 3.11+
        "test_equal (other_tests.test_m.TestCase)",
        "test_equal (test_m.Other)",
        "Docstring first line (utils_tests.test_m.TestCase)",
    ]
    assert mutant.failing_ids("tests/utils_tests/test_m.py", ids, lambda name: False) == ids[:2]


def test_a_bare_name_counts_only_where_no_other_test_file_defines_it(tmp_path: Path) -> None:
    mutant = mutate(MODULE, random.Random(1))
    assert mutant is not None
    other = tmp_path / "test_other.py"
    other.write_text("def test_flipped():\n    pass\n\n\nasync  def test_text():\n    pass\n")
    defined = defined_names(other)
    assert defined == {"test_flipped", "test_text"}
    assert defined_names(tmp_path / "missing.py") is None
    ids = ["test_double", "test_flipped", "test_text", "test_equal", "test_nothing_compared"]
    found = mutant.failing_ids("sympy/core/tests/test_m.py", ids, defined.__contains__)
    # test_flipped and test_text are defined in another test file too: their bare ids say
    # nothing of this module's; a method (TestCase::test_equal) has no bare id.
    assert found == ["test_double"]


@pytest.mark.parametrize(
    "source",
    [
        # a decorator that is not pytest's may catch what the test raises
        b"@retry\ndef test_a():\n    assert f() == 1\n",
        # the name is bound again after the def: the test run is not this function
        b"def test_a():\n    assert f() == 1\ntest_a = other\n",
        b"def test_a():\n    assert f() == 1\ndef test_a():\n    assert f()\n",
        # nothing compared with a literal at the top of the body
        b"def test_a():\n    with ctx():\n        assert f() == 1\n",
        b"def test_a():\n    assert f() == g()\n",
        b"def test_a():\n    assert f() is True\n",
        b"def test_a():\n    assert f() == True\n",
        b"def test_a():\n    assert 1 == 1\n",
        b"async def test_a():\n    assert f() == 1\n",
        b"def helper():\n    assert f() == 1\n",
        b"def test_a(:\n",
    ],
)
def test_no_mutant_where_a_test_might_still_pass_or_none_is_changed(source: bytes) -> None:
    assert mutate(source, random.Random(0)) is None


def test_a_literal_the_parser_places_elsewhere_is_left_and_its_test_not_counted() -> None:
    # latin-1: the parser's offsets are those of the UTF-8 text, so the literal is not where
    # it says on this line; the test is then not one that must fail
    source = "# -*- coding: latin-1 -*-\ndef test_a():\n    assert f('\xe9\xe9') == 'ab'\n"
    assert mutate(source.encode("latin-1"), random.Random(0)) is None


def test_modules_without_a_test_to_change_are_left_out() -> None:
    made = mutants({"a.py": MODULE, "b.py": b"def test_b():\n    assert f()\n"}, random.Random(3))
    assert set(made) == {"a.py"}


@pytest.mark.parametrize("value", ["1e20", "1.7e308", "2.5", "0.001", "-3.0", "-1", "7", "0"])
def test_a_number_always_changes_and_stays_a_finite_number_of_its_sign(value: str) -> None:
    source = f"def test_a():\n    assert f() == {value}\n".encode()
    old = ast.literal_eval(value)
    for seed in range(100):
        mutant = mutate(source, random.Random(seed))
        if mutant is None:  # only where no other value could be made
            assert value == "1.7e308"
            continue
        new = ast.literal_eval(mutant.text.decode().split("== ")[1])
        assert type(new) is type(old) and new != old and math.isfinite(new)
        assert (new > 0) == (old > 0) or old == 0


def test_a_literal_list_tuple_dict_or_set_has_its_values_changed() -> None:
    source = (
        b"def test_list():\n    assert f() == [3.0, 5.0, 7.0]\n\n"
        b"def test_nested():\n    assert f() == [(0, 1, 2), ('a',)]\n\n"
        b"def test_dict():\n    assert f() == {'k': 1, 'j': [2, 'x']}\n\n"
        b"def test_flags_only():\n    assert f() == [True, None]\n"
    )
    mutant = mutate(source, random.Random(5))
    assert mutant is not None
    assert mutant.must_fail == {"test_list", "test_nested", "test_dict"}
    before = {n: ast.literal_eval(v.body[0].test.comparators[0]) for n, v in _defs(source)}
    after = {n: ast.literal_eval(v.body[0].test.comparators[0]) for n, v in _defs(mutant.text)}
    for name in mutant.must_fail:
        assert after[name] != before[name]
        assert type(after[name]) is type(before[name]) and len(after[name]) == len(before[name])
    assert after["test_flags_only"] == before["test_flags_only"]


def test_a_set_whose_changed_values_read_as_the_same_set_is_not_counted() -> None:
    source = b"def test_set():\n    assert f() == {1, 2}\n"
    for seed in range(300):
        mutant = mutate(source, random.Random(seed))
        if mutant is not None:
            [(_, function)] = _defs(mutant.text)
            assert ast.literal_eval(function.body[0].test.comparators[0]) != {1, 2}


def test_the_bundled_hidden_modules_have_tests_to_recheck() -> None:
    tasks = Path(__file__).resolve().parents[2] / "tasks" / "smoke"
    [module] = (tasks / "slidingwindow" / "before" / "tests").glob("test_hidden_*.py")
    mutant = mutate(module.read_bytes(), random.Random(0))
    assert mutant is not None and "test_docstring_step_example" in mutant.must_fail
    # semver's one compared string stands in the test's input too ("v3.0.0-rc.10"): left
    [module] = (tasks / "semver" / "before" / "tests").glob("test_hidden_*.py")
    assert b'== "3.0.0-rc.10"' in module.read_bytes()
    assert mutate(module.read_bytes(), random.Random(0)) is None


def _defs(text: bytes) -> list[tuple[str, Any]]:
    return [(n.name, n) for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]


@pytest.mark.parametrize(
    "literal",
    ['"abc"', "'abc'", '"""abc"""', "b'abc'", 'B"abc"', '"caf\u00e9"', "42", "-7"],
)
def test_a_changed_literal_is_written_as_the_one_it_replaces(literal: str) -> None:
    source = f"def test_a():\n    assert f() == {literal}\n".encode()
    for seed in range(30):
        mutant = mutate(source, random.Random(seed))
        assert mutant is not None
        new = mutant.text.decode().split("== ")[1].rstrip("\n")
        assert ast.literal_eval(new) != ast.literal_eval(literal)
        # The same prefix and quotes, the same width: nothing tells it from a written one.
        quoted = re.compile(r"^[bB]?(\"\"\"|'|\")")
        if literal not in ("42", "-7"):
            assert len(new) == len(literal)
            assert quoted.match(new)[0] == quoted.match(literal)[0]  # type: ignore[index]


@pytest.mark.parametrize(
    ("source", "kept"),
    [
        # "sealed" is bound at the top as well, "1.2" is in the test's input
        (
            b'NAME = "sealed"\n\n'
            b'def test_name():\n    assert settings()["NAME"] == "sealed"\n\n'
            b'def test_tag():\n    assert tag("v1.2") == "1.2"\n\n'
            b'def test_other():\n    assert f() == "unseen"\n',
            [b'== "sealed"', b'== "1.2"'],
        ),
        # the tuple names a function of the module (and its line): left whole, and its 5
        # is left in test_five too; 'double' names an imported function
        (
            b"import inspect\nfrom calc import double\n\n\n"
            b"def test_where():\n"
            b"    assert where(test_where) == ('def test_where():\\n', 5)\n\n\n"
            b"def test_five():\n    assert double(2) == 5\n\n\n"
            b"def test_named():\n    assert double.__name__ == 'double'\n\n\n"
            b"def test_other():\n    assert double(3) == 6\n",
            [b"('def test_where():\\n', 5)", b"== 5\n", b"== 'double'"],
        ),
    ],
)
def test_a_literal_the_module_would_disagree_with_changed_is_left_whole(
    source: bytes, kept: list[bytes]
) -> None:
    # changed, each would show the module disagreeing with itself; so would its values
    # wherever else they are compared
    for seed in range(50):
        mutant = mutate(source, random.Random(seed))
        assert mutant is not None and mutant.must_fail == {"test_other"}
        assert all(part in mutant.text for part in kept)
