"""The frontier of several hosts' ledgers: each attempt counted once, its host named."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jouled.errors import UsageError
from jouled.frontier import frontier_rows, mark_pareto, source_label
from jouled.frontier_attempts import Key

# The columns whose figures come from a host's meters: a cross-host row holds them only
# when every host's windows carry the same source label.
METERED_COLUMNS = ("joules_total", "joules_marginal", "joules_per_resolved", "op_joules")
ALL_HOSTS = "*"


@dataclass(frozen=True)
class HostLedger:
    """One host's verified ledger, reduced to what the frontier reads."""

    host: str
    results: Sequence[Mapping[str, Any]]
    ops: Sequence[Mapping[str, Any]] = ()


def _attempt_identity(body: Mapping[str, Any]) -> tuple[str, ...] | None:
    """What makes two results on different hosts the same attempt; None: nothing does.

    A client that retries an attempt on another host reuses its idempotency key,
    so the key (with the attempt's coordinates, in case two callers chose the
    same key for different work) names one attempt across the fleet. A key
    belongs to the credential that used it: another agent's is another attempt.
    """
    key = str(body.get("idempotency_key") or "")
    if not key:
        return None
    return (
        key,
        str(body.get("task_id", "")),
        str(body.get("solver") or ""),
        str(body.get("model") or ""),
        str(body.get("run_id") or ""),
        str(int(body.get("rollout") or 0)),
        str(body.get("agent") or ""),
    )


def count_once(
    hosts: Sequence[HostLedger],
) -> tuple[dict[str, list[Mapping[str, Any]]], list[dict[str, Any]]]:
    """Each host's results with every attempt counted once across the fleet.

    An attempt retried on another host after its first host went away may have
    a result on both (the first host signed it, then vanished before the
    receipt arrived). Of the results sharing an identity (`_attempt_identity`)
    the one on the host whose name sorts first is counted, so the choice
    depends on neither the order hosts were listed in nor their clocks. The
    others come back as duplicates: host, the counted host, task, key.
    """
    owner: dict[tuple[str, ...], str] = {}
    for ledger in sorted(hosts, key=lambda h: h.host):
        for body in ledger.results:
            ident = _attempt_identity(body)
            if ident is not None and ident not in owner:
                owner[ident] = ledger.host
    kept: dict[str, list[Mapping[str, Any]]] = {}
    duplicates: list[dict[str, Any]] = []
    for ledger in hosts:
        mine = kept.setdefault(ledger.host, [])
        for body in ledger.results:
            ident = _attempt_identity(body)
            if ident is None or owner[ident] == ledger.host:
                mine.append(body)
            else:
                duplicates.append(
                    {
                        "host": ledger.host,
                        "counted_on": owner[ident],
                        "task_id": ident[1],
                        "idempotency_key": ident[0],
                    }
                )
    return kept, duplicates


def _host_label(labels: set[str]) -> str:
    """One host's energy source over its rows of one (suite, solver, model)."""
    if len(labels) == 1:
        return next(iter(labels))
    parts = {
        p for label in labels if label != "none" for p in label.removeprefix("mixed:").split(",")
    }
    return source_label(parts)


def fleet_frontier(
    hosts: Sequence[HostLedger],
    *,
    suite: str | None = None,
    axis: str = "joules",
    merge_digests: bool = False,
) -> dict[str, Any]:
    """The frontier of several hosts' ledgers: a row per (host, suite, solver, model).

    Every row names its `host` and carries its `energy_source`; Pareto flags are
    set within one host's rows. `summary` holds a row per (suite, solver, model)
    over all hosts (`host` "*", `hosts` the hosts it spans): its counts always,
    its metered columns only when every host's row has the same single source
    label (`comparable` true). Otherwise those columns are null and
    `energy_source` reads "not comparable", with each host's label in
    `energy_sources`: energy from different meters is never summed into one
    figure. Attempts are counted once across hosts (`count_once`). Revisions are
    numbered over the hosts' results in host-name order, so the summary does not
    depend on the order the hosts were listed in; a host whose rows of one
    (suite, solver, model) span several revisions reports their labels together.
    """
    if len({h.host for h in hosts}) != len(hosts):
        raise UsageError("two ledgers name the same host", hint="give each host its own name")
    kept, duplicates = count_once(hosts)
    rows: list[dict[str, Any]] = []
    labels_of: dict[Key, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    ordered = sorted(hosts, key=lambda h: h.host)
    for ledger in ordered:
        for row in frontier_rows(
            kept[ledger.host], suite=suite, axis=axis, ops=ledger.ops, merge_digests=merge_digests
        ):
            rows.append({"host": ledger.host, **row})
            key = (row["suite"], row["solver"], row["model"])
            labels_of[key][ledger.host].add(row["energy_source"])
    sources = {
        key: {host: _host_label(labels) for host, labels in by_host.items()}
        for key, by_host in labels_of.items()
    }
    every = [b for ledger in ordered for b in kept[ledger.host]]
    summary = frontier_rows(
        every,
        suite=suite,
        axis=axis,
        ops=[o for h in ordered for o in h.ops],
        merge_digests=merge_digests,
    )
    for row in summary:
        by_host = sources[(row["suite"], row["solver"], row["model"])]
        labels = {s for s in by_host.values() if s != "none"}
        comparable = len(labels) <= 1 and not any(s.startswith("mixed:") for s in labels)
        row.update(
            host=ALL_HOSTS,
            hosts=sorted(by_host),
            comparable=comparable,
            energy_sources=dict(sorted(by_host.items())),
        )
        if not comparable:
            row.update(dict.fromkeys(METERED_COLUMNS), energy_source="not comparable")
    mark_pareto(summary, axis)
    return {"rows": rows, "summary": summary, "duplicates": duplicates}
