"""The ledger benchmark's Markdown: the aims, the machine and sections 1-4."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import cryptography
import duckdb
from _ledger_appends import AppendRow
from _ledger_fixtures import PROFILE_CAP, Export
from _ledger_frontier import FrontierResult
from _ledger_proofs import ProofRow
from _ledger_timing import Profiles, Timing, seconds, verdict
from _ledger_verify import VerifyRow
from cryptography.hazmat.backends.openssl import backend as openssl_backend

from jouled import __version__

AIM_APPENDS_PER_S = 1_000.0
AIM_MERKLE_VERIFY_S = 15.0
AIM_FRONTIER_S = 1.0


def machine_facts(tmp: Path) -> list[tuple[str, str]]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "jouled"], capture_output=True, text=True
        ).stdout.strip()
        commit = f"{rev}{' + uncommitted changes under jouled/' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return [
        ("nproc", f"{os.cpu_count()} ({len(os.sched_getaffinity(0))} usable)"),
        ("CPU", cpu),
        ("memory", mem),
        ("Python", platform.python_version()),
        ("duckdb", duckdb.__version__),
        (
            "cryptography / OpenSSL",
            f"{cryptography.__version__} / {openssl_backend.openssl_version_text()}",
        ),
        ("jouled", f"{__version__} (commit {commit})"),
        ("data dir filesystem", f"{filesystem_of(tmp)} ({tmp})"),
        ("kernel", platform.release()),
        ("load average at start (1/5/15 min)", " / ".join(f"{x:.2f}" for x in os.getloadavg())),
        ("run at", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")),
    ]


def filesystem_of(path: Path) -> str:
    best, fstype = "", "unknown"
    resolved = str(path.resolve())
    with open("/proc/mounts") as fh:
        for line in fh:
            _, mount, kind, *_ = line.split()
            if (resolved == mount or resolved.startswith(mount.rstrip("/") + "/")) and len(
                mount
            ) > len(best):
                best, fstype = mount, kind
    return fstype


def render(
    n: int,
    repeats: int,
    facts: list[tuple[str, str]],
    appends: list[AppendRow],
    floor: list[tuple[str, Timing]],
    export: Export,
    verify: list[VerifyRow],
    proofs: list[ProofRow],
    front: FrontierResult,
    profiles: Profiles,
) -> str:
    single = appends[0]
    batched = max((r for r in appends if r.mode.batch > 1), key=lambda r: r.rate)
    threaded = [r for r in appends if r.mode.threads > 1]
    merkle_row = verify[0]
    frontier_total = front.bodies.median + front.rows.median
    aims = [
        (
            f"durable appends ≥ {AIM_APPENDS_PER_S:,.0f}/s (`append`, one caller)",
            f"{single.rate:,.0f}/s",
            verdict(single.rate, AIM_APPENDS_PER_S, True)[0],
        ),
        (
            f"durable appends ≥ {AIM_APPENDS_PER_S:,.0f}/s "
            f"(`append_many`, best batch: {batched.mode.batch})",
            f"{batched.rate:,.0f}/s",
            verdict(batched.rate, AIM_APPENDS_PER_S, True)[0],
        ),
        *(
            (
                f"durable appends ≥ {AIM_APPENDS_PER_S:,.0f}/s "
                f"(`append` from {r.mode.threads} threads)",
                f"{r.rate:,.0f}/s",
                verdict(r.rate, AIM_APPENDS_PER_S, True)[0],
            )
            for r in threaded
        ),
        (
            f"Merkle-only verify of {n:,} entries ≤ {AIM_MERKLE_VERIFY_S:g} s",
            seconds(merkle_row.timing.median),
            verdict(merkle_row.timing.median, AIM_MERKLE_VERIFY_S, False)[0],
        ),
        (
            f"frontier over {front.results:,} results ≤ {AIM_FRONTIER_S:g} s, rescanned "
            "(`result_bodies` + `frontier_rows`)",
            seconds(frontier_total),
            verdict(frontier_total, AIM_FRONTIER_S, False)[0],
        ),
        (
            f"frontier over {front.results:,} results ≤ {AIM_FRONTIER_S:g} s, from the "
            "daemon's running totals (`Frontier.rows()`)",
            seconds(front.totals_rows.median),
            verdict(front.totals_rows.median, AIM_FRONTIER_S, False)[0],
        ),
    ]
    out: list[str] = []
    w = out.append
    w(f"## Ledger benchmark ({n:,} entries)\n")
    w(
        f"Medians over {repeats} repeats unless a row says otherwise; the range column gives "
        'min-max of the runs behind each median. "vs aim" is measured / aim.\n'
    )
    w("### Aims\n")
    w("| aim | measured | vs aim |")
    w("|---|---:|---|")
    for aim, measured, ratio in aims:
        w(f"| {aim} | {measured} | {ratio} |")
    w("\n### Machine\n")
    w("| | |")
    w("|---|---|")
    for key, value in facts:
        w(f"| {key} | {value} |")

    w("\n### 1. Durable appends\n")
    w(
        "Each call signs, updates the tree and syncs its entries to the ledger's tail "
        "(one fdatasync); every 512 entries the call that fills the batch also replaces "
        "`checkpoint.note` and commits the batch to DuckDB. `result` bodies as "
        "`jouled.pipeline.evaluate` writes them, each attempt journaled first (untimed). "
        "The range is the wall time of whole repeats.\n"
    )
    w(
        "| mode | callers | entries per call | entries per commit | entries per repeat "
        "| appends/s | wall per call | range | vs aim |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for row in appends:
        w(
            f"| `Ledger.{row.mode.method}` | {row.mode.threads} | {row.mode.batch} | "
            f"{row.per_commit:.1f} | {row.mode.count:,} | {row.rate:,.0f} | "
            f"{seconds(row.per_call)} | "
            f"{row.timing.spread} | {verdict(row.rate, AIM_APPENDS_PER_S, True)[0]} |"
        )
    w(
        "\nSpeed-up over one caller appending one at a time: "
        + ", ".join(
            f"×{r.rate / single.rate:.1f} "
            + (f"with {r.mode.threads} threads" if r.mode.threads > 1 else f"at {r.mode.batch}")
            for r in appends[1:]
        )
        + ". With several callers `append` may commit their entries together, so "
        "wall per call is what one caller waits."
    )
    w("\nThe syncs one durable call waits for, measured alone on the same data dir:\n")
    w("| operation | median | range |")
    w("|---|---:|---|")
    for label, t in floor:
        w(f"| {label} | {seconds(t.median)} | {t.spread} |")

    w(f"\n### 2. Verifying a {n:,}-entry export\n")
    made = f"generated in {export.generated_s:.0f} s" + (
        " by an earlier run, read from the cache in bench/out/" if export.cached else " this run"
    )
    w(
        f"Export: {export.bytes / 2**20:,.0f} MiB JSONL ({export.bytes / n:,.0f} B/entry; "
        f"genesis, calibration, then results), {made}. Read line by line from the page "
        "cache; the checkpoint note covers all leaves.\n"
    )
    w("| mode | entries | time | entries/s | range | vs aim |")
    w("|---|---:|---:|---:|---|---|")
    for i, vrow in enumerate(verify):
        aim = verdict(vrow.timing.median, AIM_MERKLE_VERIFY_S, False)[0] if i == 0 else "-"
        w(
            f"| {vrow.label} | {vrow.entries:,} | {seconds(vrow.timing.median)} | "
            f"{vrow.rate:,.0f} | {vrow.timing.spread} | {aim} |"
        )
    for vrow in verify:
        if vrow.note:
            w(f"\n{vrow.label}: {vrow.note}.")

    w("\n### 3. Proofs\n")
    w("| operation | tree size | median | range | proof hashes |")
    w("|---|---:|---:|---|---:|")
    for p in proofs:
        w(
            f"| {p.label} | {p.size:,} | {seconds(p.timing.median)} | {p.timing.spread} | "
            f"{p.proof_len or '-'} |"
        )

    w(f"\n### 4. Frontier over {front.results:,} result entries\n")
    w(
        f"The DuckDB ledger was filled from the cached export with DuckDB's `read_json` "
        f"({seconds(front.load_s)}, {front.db_bytes / 2**20:,.0f} MiB; entries are the "
        "export's signed ones, not re-signed: signing is not measured here). Opening it with "
        f"`Ledger(...)` (which rechecks every stored entry against its leaf hash, "
        "its query columns and the note) took "
        f"{seconds(front.open_s)}, 1 run. {front.groups} frontier rows "
        "(suite, solver, model).\n"
    )
    w("Rescanning, as `jb-client` does over an export and the daemon once at start:\n")
    w("| step | time | per result | range | vs aim |")
    w("|---|---:|---:|---|---|")
    for label, t in (
        ("`Ledger.result_bodies()` (DuckDB → dicts)", front.bodies),
        ("`frontier.frontier_rows(bodies)` (in memory)", front.rows),
    ):
        w(
            f"| {label} | {seconds(t.median)} | {seconds(t.median / front.results)} | "
            f"{t.spread} | - |"
        )
    w(
        f"| total | {seconds(frontier_total)} | {seconds(frontier_total / front.results)} | - | "
        f"{verdict(frontier_total, AIM_FRONTIER_S, False)[0]} |"
    )
    w("\nRunning totals, as the daemon serves the frontier:\n")
    w("| step | time | range | vs aim |")
    w("|---|---:|---|---|")
    w(
        f"| `frontier.Frontier(bodies)` (built once, at daemon start) | "
        f"{seconds(front.totals_build_s)} | 1 run | - |"
    )
    w(
        "| `Ledger.frontier()` (the same totals from the query columns, as the daemon "
        f"starts; rows checked equal) | {seconds(front.columns_build_s)} | 1 run | - |"
    )
    w(
        f"| `Frontier.add(body)` (per signed result) | {seconds(front.totals_add.median)} | "
        f"{front.totals_add.spread} | - |"
    )
    w(
        f"| `Frontier.rows()` (the query) | {seconds(front.totals_rows.median)} | "
        f"{front.totals_rows.spread} | "
        f"{verdict(front.totals_rows.median, AIM_FRONTIER_S, False)[0]} |"
    )

    if profiles.summaries:
        w("\n### Profiles (cProfile, one extra pass, hottest by own time)\n")
        w(
            f"Verify and frontier passes are capped at {PROFILE_CAP:,} entries; cProfile "
            "inflates per-call overhead, so read shares, not absolute times. Full listings: "
            "bench/out/profile-*.txt.\n"
        )
        for name, lines in profiles.summaries.items():
            w(f"**{name}**\n")
            for line in lines:
                w(f"- {line}")
            w("")
    return "\n".join(out).rstrip() + "\n"
