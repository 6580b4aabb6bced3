"""Parse, compare and bump Semantic Versioning 2.0.0 version strings.

>>> parse("1.4.0-rc.1") < parse("1.4.0")
True
"""

from semver.version import Version, parse

__all__ = ["Version", "parse"]
