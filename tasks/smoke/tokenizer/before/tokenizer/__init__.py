"""A tokenizer for a small expression language.

>>> [(t.kind, t.value) for t in tokenize("f(2.5) ** 2")]
[('NAME', 'f'), ('OP', '('), ('NUMBER', 2.5), ('OP', ')'), ('OP', '**'), ('NUMBER', 2)]
"""

from tokenizer.lexer import Token, TokenizeError, tokenize

__all__ = ["Token", "TokenizeError", "tokenize"]
