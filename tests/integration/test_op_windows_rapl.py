"""An op window on a daemon metering a fake powercap tree driven at a known power.

The fake's counters advance at exactly `BUSY_W` while the window is open, so the
window's energy must be that power times the window's own signed wall time,
within what its signed edges allow (see test_meter_daemon). Nothing here asserts
on wall time itself.
"""

from __future__ import annotations

import json
import sys

from .conftest import Daemon
from .test_meter_daemon import (  # noqa: F401 - fixtures
    BUSY_W,
    DOMAIN,
    P_BUSY,
    PoweredTree,
    powered,
    rapl_daemon,
    within,
)


def test_an_op_window_meters_the_known_power(
    rapl_daemon: Daemon,  # noqa: F811 - the imported fixture
    powered: PoweredTree,  # noqa: F811
) -> None:
    powered.set_power(BUSY_W)
    # The command only has to last long enough for the tolerances to mean something.
    code = "import time; time.sleep(0.5)"
    done = rapl_daemon.client(
        "meter-run", "--label", "load", "--json", "--", sys.executable, "-c", code
    )
    assert done.returncode == 0, done.stderr
    e = json.loads(done.stdout)["energy"]
    where = f"{e}\n--- daemon log ---\n{rapl_daemon.log.read_text()}"
    assert e["source"] == "rapl" and e["valid"] is True and e["reliable"] is True, where
    assert e["attribution"] == "whole-host", where
    assert within(e["gross_mj"], P_BUSY, e), where
    assert e["marginal_mj"] == e["gross_mj"] - e["idle_mj"], where
    for zone_id, name in DOMAIN.items():
        assert within(e["domains"][name], BUSY_W[zone_id], e), where
