"""Fixtures the pipeline's tests share."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def scratch(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh directory of the test's own, outside pytest's base temp, removed after it."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    path = Path(tempfile.mkdtemp(prefix=f"{module.replace('_', '-')}-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
