"""The terminal tables stay readable on an 80-column terminal."""

from __future__ import annotations

import io
from typing import Any

import pytest
from jb_client import meter_text, render, render_fleet
from jb_client.documents import Calibration, MeterStatus
from jb_client.fleet_documents import FleetFrontier
from rich.console import Console

from tests.client.ledger import bestofk, frontier, hostile_ledger, result, task


def bodies() -> list[dict[str, Any]]:
    docs = [d["body"] for d in hostile_ledger() if d["kind"] == "result"]
    flag = [{"code": "ctypes", "path": "a.py", "line": 1, "detail": "x"}]
    for rollout in range(3):
        docs.append(
            result(
                0,
                "s/a",
                "resolved",
                solver="reference",
                model="",
                rollout=rollout,
                grade_mj=123_456_789,
                usd_micros=41_000_000,
            )["body"]
        )
        docs.append(
            result(
                0,
                "other/b",
                "tampered",
                solver="agent-with-a-long-name",
                model="model-2026-01",
                rollout=rollout,
                audit=flag,
            )["body"]
        )
    return docs


def console(width: int) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None), buf


def lines(buf: io.StringIO) -> list[str]:
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("table", ["frontier", "bestofk"])
def test_narrow_terminal_gets_the_compact_layout_within_80_columns(table: str) -> None:
    c, buf = console(80)
    if table == "frontier":
        render.frontier_table(frontier(bodies()), console=c)
    else:
        render.bestofk_table(bestofk(bodies()), console=c)
    out = lines(buf)
    assert max(len(line) for line in out) <= 80
    assert "…" not in buf.getvalue()  # nothing cut short, long names fold instead
    text = buf.getvalue()
    assert "s/reference" in text and "model-2026-01" in text


def test_compact_frontier_keeps_the_figures_a_reader_compares() -> None:
    c, buf = console(80)
    render.frontier_table(frontier(bodies()), console=c)
    row = next(line for line in lines(buf) if "reference" in line)
    assert "3/3" in row and "100.0%" in row and "44-100" in row  # resolved, CI
    assert "123,457" in row  # J per resolved
    tampered = next(line for line in lines(buf) if "other/agent" in line)
    assert "t3 a3" in tampered


def legend(buf: io.StringIO) -> str:
    """The compact frontier's legend (below the table, after a blank line), unwrapped."""
    blank = [i for i, line in enumerate(lines(buf)) if not line.strip()]
    return " ".join(" ".join(lines(buf)[blank[-1] + 1 :]).split())


def test_the_compact_frontier_explains_the_marks_it_shows_and_no_others() -> None:
    c, buf = console(80)
    render.frontier_table(frontier(bodies()), console=c)
    flagged = legend(buf)
    assert "t tampered" in flagged and "a audit flagged" in flagged, buf.getvalue()
    assert max(len(line) for line in lines(buf)) <= 80
    clean = [result(0, "s/a", "resolved", solver="checked")["body"]]
    c, buf = console(80)
    render.frontier_table(frontier(clean), console=c)
    assert legend(buf).startswith("* Pareto")
    for mark in ("t tampered", "a audit flagged", "int:", "op the agent", "r0, r1"):
        assert mark not in buf.getvalue(), mark


def test_the_compact_best_of_k_says_what_its_columns_ask_below_the_table() -> None:
    c, buf = console(80)
    render.bestofk_table(bestofk(bodies()), console=c)
    assert lines(buf)[0].strip() == "best-of-k"
    said = legend(buf)
    assert said.startswith("<=k: any of the first k rollouts resolved") and "pick:" in said


def test_successes_below_the_monitor_are_flagged_in_both_layouts() -> None:
    docs = [
        result(0, "s/a", "resolved", solver="checked")["body"],
        result(1, "s/a", "resolved", solver="older", integrity="reduced")["body"],
        result(2, "s/b", "resolved", solver="older")["body"],
    ]
    c, buf = console(80)
    render.frontier_table(frontier(docs), console=c)
    assert max(len(line) for line in lines(buf)) <= 80
    assert "int:r" in next(line for line in lines(buf) if "older" in line)
    assert "int:" not in next(line for line in lines(buf) if "checked" in line)
    c, buf = console(200)
    render.frontier_table(frontier(docs), console=c)
    assert "integrity" in buf.getvalue()
    assert "reduced" in next(line for line in lines(buf) if "older" in line)
    assert "monitor" in next(line for line in lines(buf) if "checked" in line)


def test_wide_layout_on_request_or_on_a_wide_terminal() -> None:
    c, buf = console(80)
    render.frontier_table(frontier(bodies()), console=c, wide=True)
    assert "t3 a3" not in buf.getvalue()  # every column, squeezed: the user asked
    c, buf = console(200)
    render.frontier_table(frontier(bodies()), console=c)
    assert "attempts" in buf.getvalue() and "t3 a3" not in buf.getvalue()
    c, buf = console(200)
    render.frontier_table(frontier(bodies()), console=c, wide=False)
    assert "attempts" not in buf.getvalue() and "t3 a3" in buf.getvalue()


def test_hostile_names_stay_text_in_the_compact_tables() -> None:
    c, buf = console(80)
    rows = frontier([result(0, "s/a", "resolved", solver="[bold]x[/bold]")["body"]])
    render.frontier_table(rows, console=c)
    assert "[bold]x[/bold]" in buf.getvalue()


METER = {
    "source": "rapl+nvml",
    "measured": True,
    "min_window_ms": 100,
    "domains": [
        {
            "name": f"package-{i}",
            "source": "rapl",
            "kind": "cpu",
            "resolution_uj": 61,
            "min_window_ms": 10,
        }
        for i in range(2)
    ],
    "policy": "exclusive",
    "rapl": {
        "root": "/sys/class/powercap",
        "interval_s": 0.5,
        "zones": [
            {
                "id": f"intel-rapl:{i}",
                "name": f"package-{i}",
                "domain": f"package-{i}",
                "path": f"/sys/class/powercap/intel-rapl:{i}",
                "selected": True,
                "reason": "top-level package zone (summed across sockets)",
                "max_energy_range_uj": 262_143_328_850,
                "ceiling_w": 1000.0,
                "ceiling_from": "the 1000 W floor for a package zone",
                "last_read_uj": 123_456_789_012,
                "last_read_age_ms": 12,
            }
            for i in range(2)
        ]
        + [
            {
                "id": "intel-rapl-mmio:0",
                "name": "package-0",
                "domain": "package-0",
                "path": "/sys/devices/virtual/powercap/intel-rapl-mmio/intel-rapl-mmio:0",
                "selected": False,
                "reason": "duplicate of the MSR zone named package-0",
            }
        ],
    },
    "calibration": {
        "source": "rapl",
        "seconds": 10,
        "seq": 1,
        "time": "2026-01-01T00:00:10.000Z",
        "age_s": 7300,
        "domains": {
            "package-0": {"idle_mw": 4100, "stddev_mw": 120, "timing_mw": 3, "update_us": 1100}
        },
        "idle_w": {"package-0": 4.1},
    },
}


def test_meter_prints_facts_not_dicts_within_80_columns() -> None:
    c, buf = console(80)
    render.meter_table(MeterStatus.parse(METER), console=c)
    text = buf.getvalue()
    assert max(len(line) for line in lines(buf)) <= 80
    assert "idle package-0" in text and "4.100 W ± 0.120 W" in text
    assert "ledger entry 1" in text and "(2 h ago)" in text
    assert "domain package-1" in text and "'name'" not in text


def test_key_value_tables_never_print_a_python_dict(capsys: pytest.CaptureFixture[str]) -> None:
    render.terminal.cache_clear()
    calibration = Calibration.parse(
        {
            "seq": 3,
            "time": "2026-01-01T00:00:10.000Z",
            "source": "rapl",
            "seconds": 10,
            "domains": {"package-0": {"idle_mw": 4100, "stddev_mw": 120}},
            "warnings": [],
        }
    )
    render.kv("calibration (ledger entry 3)", calibration)
    out = capsys.readouterr().out
    render.terminal.cache_clear()
    assert "{" not in out and "[" not in out, out
    assert "domains.package-0.idle_mw" in out and "4100" in out


def test_meter_prints_a_zone_table_without_host_paths() -> None:
    c, buf = console(80)
    render.meter_table(MeterStatus.parse(METER), console=c)
    assert max(len(line) for line in lines(buf)) <= 80
    c, buf = console(160)
    render.meter_table(MeterStatus.parse(METER), console=c)
    text = buf.getvalue()
    assert "/sys" not in text and "{" not in text
    for column in meter_text.ZONE_COLUMNS:
        assert column in text
    assert "package-0 (intel-rapl:0)" in text and "package-1 (intel-rapl:1)" in text
    assert "262,143.3 J" in text and "1000 W" in text
    assert "123,456.789 J, 12 ms ago" in text
    # package-0 is calibrated (its timing and measured step), package-1 is not
    assert "idle ± 3 mW, steps ≤ 1.1 ms" in text and "not calibrated" in text
    assert "skipped intel-rapl-mmio:0" in text


def test_the_reports_meter_lines_carry_the_zones_without_host_paths() -> None:
    lines = dict(meter_text.meter_lines(MeterStatus.parse(METER)))
    assert "zone package-0 (intel-rapl:0)" in lines
    assert "range 262,143.3 J" in lines["zone package-0 (intel-rapl:0)"]
    assert not any("/sys" in v for v in lines.values())


# -- whole names and figures at 80 and 100 columns ------------------------------------------

HOSTS = (
    "unix:/var/lib/jouled-fleet/rack-a/jouled.sock",
    "unix:/var/lib/jouled-fleet/rack-b/jouled.sock",
)


def fleet_doc() -> FleetFrontier:
    from jouled.frontier_fleet import HostLedger, fleet_frontier

    ledgers = []
    for i, host in enumerate(HOSTS):
        docs = [
            result(
                n,
                "s/a",
                "resolved",
                solver="agent-with-a-long-name",
                rollout=n,
                model="model-2026-01",
                grade_mj=195_432_100 + i,
            )["body"]
            for n in range(2)
        ]
        ledgers.append(HostLedger(host, docs, []))
    return FleetFrontier.parse({**fleet_frontier(ledgers), "hosts": [], "unreachable": []})


def column_text(buf: io.StringIO, header: str, following: str) -> str:
    """One column's text with folding undone: the slice of every line between the
    column's header and the next one's, joined back together."""
    out = lines(buf)
    head = next(line for line in out if header in line and following in line)
    start, end = head.index(header), head.index(following)
    return "".join(line[start:end].strip(" │┃") for line in out[out.index(head) + 1 :])


@pytest.mark.parametrize("width", [80, 100])
def test_fleet_frontier_shows_hosts_and_figures_whole(width: int) -> None:
    c, buf = console(width)
    render_fleet.fleet_frontier_table(fleet_doc(), console=c)
    text = buf.getvalue()
    assert max(len(line) for line in lines(buf)) <= width
    assert "…" not in text
    assert "rack-arack-ball (2)" in column_text(buf, "host", "solver")
    for host in HOSTS:  # the meaningful part in the table, the whole name below it
        assert f"{host.split('/')[-2]} = {host}" in lines(buf)
    assert "390,864" in text and "195,432" in text  # J total and J per resolved, whole


def test_host_labels_keep_what_tells_hosts_apart() -> None:
    assert render_fleet.host_labels(list(HOSTS)) == {HOSTS[0]: "rack-a", HOSTS[1]: "rack-b"}
    both = ["a:7000", "b:7000"]
    assert render_fleet.host_labels(both) == {"a:7000": "a:7000", "b:7000": "b:7000"}
    one = "unix:/run/jouled/jouled.sock"
    assert render_fleet.host_labels([one]) == {one: one}
    nested = ["unix:/srv/x/jouled.sock", "unix:/srv/x/y/jouled.sock"]
    assert render_fleet.host_labels(nested) == {nested[0]: "x", nested[1]: "x/y"}


def test_wide_frontier_on_a_narrow_terminal_keeps_every_column_readable() -> None:
    c, buf = console(100)
    render.frontier_table(frontier(bodies()), console=c, wide=True)
    text = buf.getvalue()
    assert "…" not in text
    header = next(line for line in lines(buf) if "┃" in line and "attempts" in line)
    for col in ("suite", "solver", "attempts", "resolution", "J/resolved", "$ claimed", "audit"):
        assert col in header  # each header on one line: the table runs on past the edge
    row = next(line for line in lines(buf) if "reference" in line)
    assert "123,457" in row and "123.0000" in row


def test_wide_bestofk_on_a_narrow_terminal_keeps_every_column_readable() -> None:
    c, buf = console(80)
    render.bestofk_table(bestofk(bodies()), console=c, wide=True)
    assert "…" not in buf.getvalue()
    header = next(line for line in lines(buf) if "resolution<=k" in line)
    assert "J cumulative" in header and "$ cumulative" in header


@pytest.mark.parametrize("width", [80, 100])
def test_tasks_table_never_cuts_an_id(width: int) -> None:
    long_id = "a-suite-with-a-long-name/a-task-whose-id-runs-on-and-on-past-the-column"
    t = task(
        task_id=long_id,
        kind="python",
        digest="0123456789abcdef" * 4,
        timeout_s=600,
        hidden_files=3,
        prompt="Fix the parser so that it accepts nested brackets. " * 4,
    )
    c, buf = console(width)
    render.tasks_table([t], console=c)
    assert max(len(line) for line in lines(buf)) <= width
    assert long_id in column_text(buf, "task", "kind")
    assert "0123456789ab" in buf.getvalue()  # the digest's 12 characters, whole


@pytest.mark.parametrize("width", [80, 100])
def test_tasks_whose_ids_fit_take_one_line_each(width: int) -> None:
    """An id a reader copies stays on one line; the prompt gives way, cut with an ellipsis."""
    tasks = [
        task(
            task_id=f"smoke/a-task-number-{n}",
            kind="local",
            digest="0123456789abcdef" * 4,
            timeout_s=60,
            hidden_files=0,
            prompt="Fix the parser so that it accepts nested brackets. " * 4,
        )
        for n in range(3)
    ]
    c, buf = console(width)
    render.tasks_table(tasks, console=c)
    rows = [line for line in lines(buf) if "smoke/" in line]
    assert len(rows) == 3 and max(len(line) for line in lines(buf)) <= width
    for n, row in enumerate(rows):
        assert f"smoke/a-task-number-{n}" in row and "0123456789ab" in row
        assert "Fix the" in row and "…" in row


@pytest.mark.parametrize("wide", [True, False])
def test_bestofk_shows_no_claim_as_the_frontier_does(wide: bool) -> None:
    docs = [
        result(n, "s/a", "resolved", solver="unclaimed", rollout=n)["body"] for n in range(2)
    ] + [
        result(2 + n, "s/a", "resolved", solver="claimed", rollout=n, usd_micros=500_000)["body"]
        for n in range(2)
    ]
    rows = bestofk(docs)
    assert {r.solver: r.usd_cumulative for r in rows if r.k == 2} == {
        "unclaimed": None,  # unknown, as the frontier's usd_total: never $0
        "claimed": 1.0,
    }
    totals = {r.solver: r.usd_total for r in frontier(docs)}
    assert totals["unclaimed"] is None
    c, buf = console(200)
    render.bestofk_table(rows, console=c, wide=wide)
    for line in lines(buf):
        if "unclaimed" in line:
            assert "0.0000" not in line and "-" in line
    assert "0.5000" in buf.getvalue()


def test_the_readme_numbers_revisions_as_the_json_and_the_tables_do() -> None:
    import re
    from pathlib import Path

    docs = []
    for n, digest in enumerate(("a" * 64, "b" * 64)):
        body = result(n, "s/a", "resolved")["body"]
        docs.append({**body, "task_digest": digest})
    revisions = sorted(r.revision for r in frontier(docs) if r.revision is not None)
    assert revisions == [0, 1]
    c, buf = console(80)
    render.frontier_table(frontier(docs), console=c)
    assert " r0" in buf.getvalue() and " r1" in buf.getvalue()
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    said = re.search(r"`revision` (\d+)[^,;.]*?, then (\d+)", " ".join(readme.split()))
    assert said is not None, "the README says how revisions are numbered"
    assert [int(said[1]), int(said[2])] == revisions


def test_an_estimator_s_calibration_says_it_sampled_nothing_not_zero_seconds() -> None:
    cal = {"source": "estimator", "seconds": 0, "seq": 2, "domains": {}}
    head = dict(meter_text.calibration_lines(cal))["calibration"]
    assert "estimator: nothing measured, so no idle to sample" in head and "0 s" not in head
    rapl = dict(meter_text.calibration_lines({**cal, "source": "rapl", "seconds": 10}))
    assert "10 s of rapl" in rapl["calibration"]


@pytest.mark.parametrize("table", ["frontier", "bestofk"])
def test_a_terminal_too_narrow_for_the_full_table_gets_the_compact_one(table: str) -> None:
    """Between the threshold and the full table's own width (216 columns for the
    frontier), the full table would run past the terminal's edge."""
    draw = render.frontier_table if table == "frontier" else render.bestofk_table
    data = frontier(bodies()) if table == "frontier" else bestofk(bodies())
    buf = io.StringIO()
    narrow = Console(file=buf, width=165, color_system=None, force_terminal=True)
    draw(data, console=narrow)  # type: ignore[arg-type]
    assert max(len(line) for line in lines(buf)) <= 165, buf.getvalue()
    assert "leave out --wide" not in buf.getvalue()
    buf = io.StringIO()
    draw(data, console=Console(file=buf, width=400, color_system=None, force_terminal=True))  # type: ignore[arg-type]
    assert max(len(line) for line in lines(buf)) > 165  # the full table, where it fits


def test_counts_read_as_english() -> None:
    from jb_client import cells

    assert cells.count(1, "task") == "1 task" and cells.count(0, "task") == "0 tasks"
    assert cells.count(3, "paired task") == "3 paired tasks"
