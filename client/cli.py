"""`jb-client`: a thin CLI over `jb_client.api` and the offline verifier.

Tables on a terminal, `--json` on stdout for scripts, progress and logs on
stderr. Exit codes: 0 ok, 1 a failed check, 2 usage or a rejected request,
3 the daemon cannot be reached.

The global options and the helpers every command shares are in `cli_common`;
the commands live in one module per group and are registered here, in the
order `--help` lists them.
"""

from __future__ import annotations

from jb_client import cli_attempts, cli_ledger, cli_meter, cli_results, cli_swebench
from jb_client.cli_common import app

for command, name in (
    (cli_attempts.tasks, None),
    (cli_attempts.fetch, None),
    (cli_attempts.submit, None),
    (cli_attempts.run, None),
    (cli_results.frontier, None),
    (cli_results.compare, None),
    (cli_swebench.swebench, None),
    (cli_results.logs, None),
    (cli_results.receipt, None),
    (cli_results.keys, None),
    (cli_results.bestofk, None),
    (cli_ledger.export, None),
    (cli_ledger.verify, None),
    (cli_ledger.audit, None),
    (cli_ledger.checkpoint_cmd, "checkpoint"),
    (cli_ledger.proof, None),
    (cli_ledger.consistency, None),
    (cli_meter.meter, None),
    (cli_meter.calibrate, None),
    (cli_meter.meter_run, "meter-run"),
    (cli_results.report, None),
):
    app.command(name)(command)

__all__ = ["app", "main"]


def main() -> None:
    app()
