"""Turn expression source text into a list of tokens.

Token kinds:

``NUMBER``
    ``42``, ``3.14``, ``.5``, ``6.``, ``1e-3``; the value is an ``int`` when
    the literal has no fraction or exponent, a ``float`` otherwise.
``STRING``
    Single- or double-quoted, on one line. Backslash escapes ``\\\\``,
    ``\\'``, ``\\"``, ``\\n`` and ``\\t`` are recognised; the value is the
    decoded text without the quotes.
``NAME``
    Identifiers: a letter or underscore followed by letters, digits or
    underscores.
``OP``
    ``+ - * / % ** ( ) , < > <= >= == != =``.

Whitespace separates tokens and is otherwise ignored.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

_NUMBER_RE = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_OPERATORS = ("**", "<=", ">=", "==", "!=", "+", "-", "*", "/", "%", "(", ")", ",", "<", ">", "=")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}


class Token(NamedTuple):
    kind: str
    value: Any
    pos: int


class TokenizeError(ValueError):
    """Raised for input that is not a valid token stream; ``pos`` is the offset of the problem."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} at position {pos}")
        self.pos = pos


def _unescape(body: str, offset: int) -> str:
    """Decode backslash escapes in a string literal body starting at ``offset``."""
    out = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            if i + 1 == len(body):
                raise TokenizeError("incomplete escape sequence", offset + i)
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise TokenizeError(f"unknown escape sequence \\{nxt}", offset + i)
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _scan_string(text: str, start: int) -> tuple[Token, int]:
    quote = text[start]
    end = text.find(quote, start + 1)
    newline = text.find("\n", start + 1)
    if end == -1 or -1 < newline < end:
        raise TokenizeError("unterminated string literal", start)
    return Token("STRING", _unescape(text[start + 1 : end], start + 1), start), end + 1


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, raising :class:`TokenizeError` on invalid input."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch.isspace():
            pos += 1
            continue
        if ch in "'\"":
            token, pos = _scan_string(text, pos)
            tokens.append(token)
            continue
        match = _NUMBER_RE.match(text, pos)
        if match:
            literal = match.group()
            is_int = literal.isdigit()
            tokens.append(Token("NUMBER", int(literal) if is_int else float(literal), pos))
            pos = match.end()
            if pos < len(text) and (text[pos].isalnum() or text[pos] in "_."):
                raise TokenizeError(
                    f"invalid number literal {text[match.start() : pos + 1]!r}", match.start()
                )
            continue
        match = _NAME_RE.match(text, pos)
        if match:
            tokens.append(Token("NAME", match.group(), pos))
            pos = match.end()
            continue
        for op in _OPERATORS:
            if text.startswith(op, pos):
                tokens.append(Token("OP", op, pos))
                pos += len(op)
                break
        else:
            raise TokenizeError(f"unexpected character {ch!r}", pos)
    return tokens
