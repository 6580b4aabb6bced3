"""A module imported on its first use, so a command pays only for what it calls."""

from __future__ import annotations

import importlib
from typing import Any


class Later:
    """Stands for the module `name` until an attribute is read, then imports it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported on first use>"
