"""`make bench`: every benchmark in one go, each printing its Markdown section.

The ledger benchmark runs at 100,000 entries here (`--quick`); run
`python bench/ledger_bench.py` for the 1,000,000-entry figures in RESULTS.md; the
scale comparison likewise at 100,000 (`python bench/scale_bench.py` for 1,000,000).
Sections are also written under bench/out/ (git-ignored).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = (
    ["overhead.py"],
    ["sandbox_bench.py"],
    ["meter_bench.py"],
    ["ledger_bench.py", "--quick"],
    ["scale_bench.py", "--entries", "100000", "--repeats", "1", "--cli-repeats", "5"],
    ["load_bench.py"],
)


def main() -> int:
    failed = []
    for run in RUNS:
        print(f"\n<!-- bench/{' '.join(run)} -->", flush=True)
        if subprocess.run([sys.executable, str(HERE / run[0]), *run[1:]]).returncode != 0:
            failed.append(run[0])
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
