import json

import pytest

from jouled.ledger import canonical


def test_keys_sorted_by_utf16_code_units_and_no_whitespace() -> None:
    # U+E000 sorts before U+1F600 in UTF-16 (surrogates are 0xD83D...) but after it in UTF-32.
    doc = {"b": 1, "a": [True, None, "x"], "\U0001f600": 0, "\ue000": 0}
    assert canonical.dumps(doc) == '{"a":[true,null,"x"],"b":1,"\U0001f600":0,"\ue000":0}'


def test_strings_escape_minimally() -> None:
    assert canonical.dumps('é\n"\\\x1f') == '"é\\n\\"\\\\\\u001f"'


def test_round_trips_through_json() -> None:
    doc = {"seq": 3, "body": {"nested": {"z": -5, "y": ""}}, "kind": "result"}
    assert json.loads(canonical.dumpb(doc)) == doc


@pytest.mark.parametrize("bad", [1.5, 2**53, {1: "x"}, b"bytes", object()])
def test_refuses_what_has_no_single_canonical_form(bad: object) -> None:
    with pytest.raises(canonical.CanonicalError):
        canonical.dumps({"v": bad})


def test_fast_path_equals_the_general_encoder_on_random_documents() -> None:
    import random

    chars = [0x41, 0x61, 0x7F, 0x0A, 0x1F, 0xE9, 0x22, 0x5C, 0x2028, 0xE000, 0x1F600]
    rng = random.Random(7)

    def text(n: int) -> str:
        return "".join(chr(rng.choice(chars)) for _ in range(rng.randint(0, n)))

    def doc(depth: int = 0) -> object:
        r = rng.random()
        if depth > 3 or r < 0.3:
            return rng.choice([None, True, False, rng.randint(-(2**53) + 1, 2**53 - 1), text(5)])
        if r < 0.6:
            return [doc(depth + 1) for _ in range(rng.randint(0, 4))]
        return {text(3): doc(depth + 1) for _ in range(rng.randint(0, 4))}

    for _ in range(3000):
        value = doc()
        general: list[str] = []
        canonical._encode(value, general)
        assert canonical.dumps(value) == "".join(general)
