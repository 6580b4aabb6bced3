"""Setup shared by the meter benchmark's parts: which `jouled` is measured, the fake
powercap trees it is measured on, and progress on stderr.

Every part imports this module before `jouled`, so that `--compare` (which sets
METER_BENCH_TREE) measures the other tree's meter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The fake powercap tree lives with the meter tests; the bench reuses it.
sys.path.insert(0, str(REPO))
# `--compare` runs the fault cells against another tree's `jouled` (a directory
# holding it, without tests/): the fakes still come from this one.
if os.environ.get("METER_BENCH_TREE"):
    sys.path.insert(0, os.environ["METER_BENCH_TREE"])

from tests.meter.fakes import FakePowercap  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- fake trees ---------------------------------------------------------------------------


def one_package(root: Path) -> FakePowercap:
    fake = FakePowercap(root)
    fake.package(0, energy_uj=123_456_789)
    return fake


def two_packages_dram(root: Path) -> FakePowercap:
    fake = FakePowercap(root)
    for n in (0, 1):
        # The counters stand still: the mirror probe sees zero deltas and keeps every zone.
        fake.package(n, energy_uj=100_000_000 * (n + 1))
        fake.subzone(f"intel-rapl:{n}", 0, "dram", energy_uj=7_000_000 * (n + 1))
    return fake
