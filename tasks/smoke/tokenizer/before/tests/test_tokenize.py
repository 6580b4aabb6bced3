import pytest
from tokenizer import Token, TokenizeError, tokenize


def kinds_values(text):
    return [(t.kind, t.value) for t in tokenize(text)]


def test_arithmetic_expression():
    assert kinds_values("a + 2*b_1 ** 3") == [
        ("NAME", "a"),
        ("OP", "+"),
        ("NUMBER", 2),
        ("OP", "*"),
        ("NAME", "b_1"),
        ("OP", "**"),
        ("NUMBER", 3),
    ]


def test_positions():
    assert tokenize("f(x, 10)") == [
        Token("NAME", "f", 0),
        Token("OP", "(", 1),
        Token("NAME", "x", 2),
        Token("OP", ",", 3),
        Token("NUMBER", 10, 5),
        Token("OP", ")", 7),
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [("42", 42), ("3.25", 3.25), (".5", 0.5), ("6.", 6.0), ("1e-3", 0.001), ("2E+2", 200.0)],
)
def test_number_literals(text, value):
    [token] = tokenize(text)
    assert token.kind == "NUMBER"
    assert token.value == value
    assert type(token.value) is type(value)


@pytest.mark.parametrize("text", ["12abc", "1.2.3", "1e"])
def test_malformed_numbers(text):
    with pytest.raises(TokenizeError):
        tokenize(text)


def test_comparison_operators():
    assert [t.value for t in tokenize("a<=b != c>=d == e<f")] == [
        "a",
        "<=",
        "b",
        "!=",
        "c",
        ">=",
        "d",
        "==",
        "e",
        "<",
        "f",
    ]


def test_simple_strings_and_escapes():
    assert kinds_values("'abc' \"d\\te\" 'x\\\\y'") == [
        ("STRING", "abc"),
        ("STRING", "d\te"),
        ("STRING", "x\\y"),
    ]


def test_escaped_quote_inside_string():
    assert kinds_values(r'"say \"hi\"" + x') == [
        ("STRING", 'say "hi"'),
        ("OP", "+"),
        ("NAME", "x"),
    ]


def test_escaped_single_quote():
    assert kinds_values(r"concat('it\'s', name)") == [
        ("NAME", "concat"),
        ("OP", "("),
        ("STRING", "it's"),
        ("OP", ","),
        ("NAME", "name"),
        ("OP", ")"),
    ]


def test_escaped_backslash_before_closing_quote():
    assert kinds_values(r"'C:\\' + 'tmp'") == [("STRING", "C:\\"), ("OP", "+"), ("STRING", "tmp")]


def test_unterminated_string():
    with pytest.raises(TokenizeError, match="unterminated") as info:
        tokenize("x = 'abc")
    assert info.value.pos == 4


def test_string_ending_in_escaped_quote_is_unterminated():
    with pytest.raises(TokenizeError, match="unterminated"):
        tokenize(r'"abc\"')


def test_unknown_character():
    with pytest.raises(TokenizeError) as info:
        tokenize("a $ b")
    assert info.value.pos == 2
