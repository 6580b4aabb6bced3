"""The :class:`Version` type."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import total_ordering

_NUM = r"0|[1-9][0-9]*"
_PRE_ID = rf"(?:{_NUM}|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_BUILD_ID = r"[0-9A-Za-z-]+"
_VERSION_RE = re.compile(
    rf"(?P<major>{_NUM})\.(?P<minor>{_NUM})\.(?P<patch>{_NUM})"
    rf"(?:-(?P<pre>{_PRE_ID}(?:\.{_PRE_ID})*))?"
    rf"(?:\+(?P<build>{_BUILD_ID}(?:\.{_BUILD_ID})*))?"
)


@total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    """A semantic version ``MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]``.

    Ordering follows the precedence rules of SemVer 2.0.0 (section 11):
    major, minor and patch compare numerically; a pre-release version has
    lower precedence than the same version without one; pre-release
    identifiers compare one by one, numerically when both are numeric and
    lexically in ASCII order otherwise, with numeric identifiers lower than
    alphanumeric ones and a shorter list lower when it is a prefix of the
    longer one. Build metadata is ignored by both ordering and equality.
    """

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def _precedence(self) -> tuple:
        core = (self.major, self.minor, self.patch)
        if not self.prerelease:
            return core + (1,)
        identifiers = tuple(
            (0, int(ident), "") if ident.isdigit() else (1, 0, ident) for ident in self.prerelease
        )
        return core + (0, identifiers)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._precedence() == other._precedence()

    def __lt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._precedence() < other._precedence()

    def __hash__(self) -> int:
        return hash(self._precedence())

    @property
    def is_prerelease(self) -> bool:
        return bool(self.prerelease)

    def bump_major(self) -> Version:
        return Version(self.major + 1, 0, 0)

    def bump_minor(self) -> Version:
        return Version(self.major, self.minor + 1, 0)

    def bump_patch(self) -> Version:
        """The next patch release; a pre-release of X.Y.Z bumps to X.Y.Z itself."""
        if self.prerelease:
            return Version(self.major, self.minor, self.patch)
        return Version(self.major, self.minor, self.patch + 1)


def parse(text: str) -> Version:
    """Parse a version string, rejecting anything SemVer 2.0.0 does not allow.

    A leading ``"v"`` (as in git tags) is accepted and dropped.
    """
    candidate = text.strip()
    if candidate[:1] in ("v", "V"):
        candidate = candidate[1:]
    match = _VERSION_RE.fullmatch(candidate)
    if match is None:
        raise ValueError(f"not a semantic version: {text!r}")
    pre = match["pre"]
    build = match["build"]
    return Version(
        int(match["major"]),
        int(match["minor"]),
        int(match["patch"]),
        tuple(pre.split(".")) if pre else (),
        tuple(build.split(".")) if build else (),
    )
