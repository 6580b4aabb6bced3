"""A reader for the small YAML subset the deploy manifests use; anything else is an error.

The venv has no YAML library, and the manifests need only: block mappings and
sequences, flow mappings and sequences of scalars, plain and quoted scalars,
and comments. A construct outside that (anchors, tags, block scalars,
multi-document streams) raises YamlishError naming the line, so a manifest
never passes by being misread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Node = object  # dict[str, Node] | list[Node] | str | int | float | bool | None


class YamlishError(ValueError):
    pass


@dataclass
class _Line:
    number: int
    indent: int
    text: str


_UNSUPPORTED = re.compile(r"^(---|\.\.\.)$|^[&*!|>]|:\s+[&*!|>]|^-\s+[&*!|>]")


def _strip_comment(text: str) -> str:
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def _lines(source: str) -> list[_Line]:
    out = []
    for number, raw in enumerate(source.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlishError(f"line {number}: tab in indentation")
        text = _strip_comment(raw)
        if not text.strip():
            continue
        body = text.strip()
        if _UNSUPPORTED.search(body):
            raise YamlishError(f"line {number}: unsupported YAML construct: {body!r}")
        out.append(_Line(number, len(text) - len(text.lstrip(" ")), body))
    return out


def scalar(text: str) -> Node:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "True"):
        return True
    if text in ("false", "False"):
        return False
    if text in ("null", "~", ""):
        return None
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text, 8) if len(text) > 1 and text.startswith("0") else int(text)
    return text


def _split_flow(body: str, number: int) -> list[str]:
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(body):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i].strip())
            start = i + 1
    if depth or quote:
        raise YamlishError(f"line {number}: unbalanced flow collection")
    tail = body[start:].strip()
    return [*parts, tail] if tail else parts


def _key_value(text: str, number: int) -> tuple[str, str] | None:
    match = re.match(r"""^("[^"]*"|'[^']*'|[^\s:'"{}\[\],][^:]*?):(?:\s+(.*))?$""", text)
    if not match:
        return None
    key = scalar(match.group(1).strip())
    if not isinstance(key, str):
        raise YamlishError(f"line {number}: mapping key {key!r} is not a string")
    return key, (match.group(2) or "").strip()


def flow(text: str, number: int) -> Node:
    if text.startswith("{"):
        if not text.endswith("}"):
            raise YamlishError(f"line {number}: flow mapping does not close on its line")
        result: dict[str, Node] = {}
        for part in _split_flow(text[1:-1], number):
            kv = _key_value(part, number)
            if kv is None:
                raise YamlishError(f"line {number}: {part!r} is not KEY: VALUE")
            if kv[0] in result:
                raise YamlishError(f"line {number}: duplicate key {kv[0]!r}")
            result[kv[0]] = flow(kv[1], number)
        return result
    if text.startswith("["):
        if not text.endswith("]"):
            raise YamlishError(f"line {number}: flow sequence does not close on its line")
        return [flow(part, number) for part in _split_flow(text[1:-1], number)]
    return scalar(text)


class _Parser:
    def __init__(self, lines: list[_Line]) -> None:
        self.lines = lines
        self.i = 0

    def block(self, indent: int) -> Node:
        line = self.lines[self.i]
        if line.text.startswith("- ") or line.text == "-":
            return self.sequence(line.indent)
        return self.mapping(line.indent)

    def value(self, rest: str, parent_indent: int, number: int) -> Node:
        if rest:
            return flow(rest, number)
        if self.i < len(self.lines):
            nxt = self.lines[self.i]
            # A sequence may sit at its key's own indent ("key:\n- a").
            if nxt.indent > parent_indent or (
                nxt.indent == parent_indent and nxt.text.startswith("- ")
            ):
                return self.block(nxt.indent)
        return None

    def mapping(self, indent: int) -> dict[str, Node]:
        result: dict[str, Node] = {}
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.indent < indent:
                break
            if line.indent > indent:
                raise YamlishError(f"line {line.number}: unexpected indentation")
            if line.text.startswith("- "):
                break
            kv = _key_value(line.text, line.number)
            if kv is None:
                raise YamlishError(f"line {line.number}: expected KEY: VALUE, got {line.text!r}")
            key, rest = kv
            if key in result:
                raise YamlishError(f"line {line.number}: duplicate key {key!r}")
            self.i += 1
            result[key] = self.value(rest, indent, line.number)
        return result

    def sequence(self, indent: int) -> list[Node]:
        result: list[Node] = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.indent != indent or not (line.text.startswith("- ") or line.text == "-"):
                if line.indent > indent:
                    raise YamlishError(f"line {line.number}: unexpected indentation")
                break
            item = line.text[1:].lstrip()
            if not item:
                self.i += 1
                result.append(self.value("", indent, line.number))
            elif _key_value(item, line.number) is not None and not item.startswith("{"):
                # "- key: value" opens a mapping whose keys sit at the item's column.
                self.lines[self.i] = _Line(line.number, indent + len(line.text) - len(item), item)
                result.append(self.mapping(self.lines[self.i].indent))
            else:
                self.i += 1
                result.append(flow(item, line.number))
        return result


def load(source: str) -> Node:
    """The one document in `source`; YamlishError for anything outside the subset."""
    lines = _lines(source)
    if not lines:
        return None
    parser = _Parser(lines)
    doc = parser.block(lines[0].indent)
    if parser.i != len(lines):
        line = lines[parser.i]
        raise YamlishError(f"line {line.number}: unexpected content {line.text!r}")
    return doc
