from itertools import pairwise

import pytest
from semver import Version, parse


def test_parse_full_version():
    v = parse("1.2.3-beta.4+build.567")
    assert v == Version(1, 2, 3, ("beta", "4"), ("build", "567"))
    assert (v.major, v.minor, v.patch) == (1, 2, 3)
    assert v.build == ("build", "567")
    assert str(v) == "1.2.3-beta.4+build.567"


def test_parse_accepts_tag_prefix():
    assert parse("v2.0.0") == Version(2, 0, 0)


@pytest.mark.parametrize(
    "text",
    ["1.2", "1.2.3.4", "01.2.3", "1.2.3-", "1.2.3-01", "1.2.3+", "1.2.3-a..b", "one.two.three"],
)
def test_parse_rejects_invalid(text):
    with pytest.raises(ValueError):
        parse(text)


def test_core_versions_compare_numerically():
    assert parse("1.10.0") > parse("1.9.0")
    assert parse("2.0.0") > parse("1.99.99")
    assert parse("0.0.10") > parse("0.0.9")


def test_prerelease_sorts_before_release():
    assert parse("1.0.0-alpha") < parse("1.0.0")
    assert parse("1.0.0-rc.1") < parse("1.0.0")
    assert parse("1.0.0") < parse("1.0.1-alpha")


def test_build_metadata_is_ignored():
    assert parse("1.0.0+20130313144700") == parse("1.0.0+exp.sha.5114f85")
    assert len({parse("1.0.0+a"), parse("1.0.0+b")}) == 1


def test_specification_precedence_example():
    chain = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
    ]
    versions = [parse(text) for text in chain]
    for lower, higher in pairwise(versions):
        assert lower < higher, (str(lower), str(higher))


def test_numeric_prerelease_identifiers_compare_as_numbers():
    assert parse("2.1.0-rc.10") > parse("2.1.0-rc.9")
    assert parse("1.0.0-2") < parse("1.0.0-10")


def test_numeric_identifier_lower_than_alphanumeric():
    assert parse("1.0.0-1") < parse("1.0.0-alpha")
    assert parse("1.0.0-alpha.9") < parse("1.0.0-alpha.x")


def test_sorting_release_candidates():
    tags = ["v3.0.0-rc.10", "v3.0.0", "v3.0.0-rc.2", "v3.0.0-rc.1", "v2.9.1"]
    assert [str(v) for v in sorted(map(parse, tags))] == [
        "2.9.1",
        "3.0.0-rc.1",
        "3.0.0-rc.2",
        "3.0.0-rc.10",
        "3.0.0",
    ]


def test_bumping():
    v = parse("1.4.7")
    assert str(v.bump_patch()) == "1.4.8"
    assert str(v.bump_minor()) == "1.5.0"
    assert str(v.bump_major()) == "2.0.0"
    assert str(parse("1.5.0-rc.3").bump_patch()) == "1.5.0"
