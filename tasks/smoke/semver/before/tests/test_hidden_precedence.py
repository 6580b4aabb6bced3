from functools import reduce

import pytest
from semver import parse

# The precedence example of SemVer 2.0.0, section 11, in ascending order.
SPEC_ORDER = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
]


def test_spec_precedence_example_sorts_in_order():
    shuffled = SPEC_ORDER[3:] + SPEC_ORDER[:3]
    assert [str(v) for v in sorted(map(parse, shuffled))] == SPEC_ORDER


@pytest.mark.parametrize("low, high", list(zip(SPEC_ORDER, SPEC_ORDER[1:])))
def test_each_spec_neighbour_is_lower(low, high):
    assert parse(low) < parse(high)
    assert not parse(high) < parse(low)


def test_newest_release_candidate_tag_wins():
    tags = ["v3.0.0-rc.9", "v3.0.0-rc.10", "v3.0.0-rc.2", "v2.9.1"]
    assert str(max(map(parse, tags))) == "3.0.0-rc.10"


def test_numeric_identifiers_sort_below_alphanumeric_ones():
    assert parse("1.0.0-1") < parse("1.0.0-alpha")
    assert parse("1.0.0-999") < parse("1.0.0-a")


def test_build_metadata_is_ignored_by_equality_and_hash():
    a, b = parse("1.0.0-rc.1+build.1"), parse("1.0.0-rc.1+build.2")
    assert a == b
    assert hash(a) == hash(b)


def test_long_numeric_chain_is_ordered():
    versions = [parse(f"2.0.0-beta.{n}") for n in (100, 9, 10, 1, 99)]
    assert reduce(max, versions) == parse("2.0.0-beta.100")
