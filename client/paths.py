"""The files an export writes beside its JSONL (docs/ledger.md, Exports)."""

from __future__ import annotations

from pathlib import Path


def checkpoint_history_path(export: Path) -> Path:
    return export.with_name(export.name + ".checkpoints.jsonl")


def parquet_path(export: Path) -> Path:
    return export.with_name(export.name + ".parquet")
