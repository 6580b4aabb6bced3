"""Fenced code blocks of the pages in docs/, with the marker that says what each one is.

Every fenced block is preceded, on the line just above its opening fence, by
an HTML comment that a rendered page does not show:

    <!-- example: python -->            run as a script against a live daemon
    <!-- example: sh -->                run with bash against a live daemon
    <!-- example: json payload KIND --> a ledger payload of that kind: same shape as a real one
    <!-- example: json export-line -->  an export line: same shape as a real one
    <!-- example: json receipt -->      a receipt: same shape as a real one
    <!-- example: json vector -->       a test vector, recomputed exactly
    <!-- not-run: WHY -->               a synopsis or grammar, not an example

A block without a marker is an error, so no example can slip past the tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"

_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
_MARKER = re.compile(r"^<!--\s*(example|not-run):\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    marker: str  # "example", "not-run" or "" (none)
    args: tuple[str, ...]
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(DOCS.parent)}:{self.line}"


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start, close = i, fence.group(1)
        marker = _MARKER.match(lines[i - 1]) if i else None
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].startswith(close):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        found.append(
            Block(
                page=page,
                line=start + 1,
                lang=fence.group(2),
                marker=marker.group(1) if marker else "",
                args=tuple(marker.group(2).split()) if marker else (),
                text="\n".join(body) + "\n",
            )
        )
    return found


def examples(page: Path, kind: str) -> list[Block]:
    """The page's examples whose first argument is `kind` (python, sh, json)."""
    return [b for b in blocks(page) if b.marker == "example" and b.args[:1] == (kind,)]
