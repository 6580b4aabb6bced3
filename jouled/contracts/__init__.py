"""Tasks and SWE-bench records compiled to contracts, and the registry the daemon serves."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from pathlib import Path

from jouled.contracts.contract import Contract, split_task_id
from jouled.contracts.task import discover
from jouled.errors import NotFoundError, TaskError, UnknownTaskError

__all__ = ["Contract", "TaskRegistry"]


class TaskRegistry:
    def __init__(self, contracts: Iterable[Contract] = ()) -> None:
        self._by_id: dict[str, Contract] = {}
        for contract in contracts:
            self.add(contract)

    @classmethod
    def from_dirs(cls, dirs: Iterable[Path]) -> TaskRegistry:
        registry = cls()
        for d in dirs:
            for contract in discover(d):
                registry.add(contract)
        return registry

    def add(self, contract: Contract) -> None:
        if contract.task_id in self._by_id:
            raise TaskError(f"task {contract.task_id} is defined twice")
        self._by_id[contract.task_id] = contract

    def register(self, contract: Contract) -> bool:
        """Add a contract, or accept the identical one again; True when it is new."""
        known = self._by_id.get(contract.task_id)
        if known is None:
            self.add(contract)
            return True
        if known.digest != contract.digest:
            raise TaskError(
                f"task {contract.task_id} is already registered with another digest",
                hint="restart the daemon to replace a task definition",
            )
        return False

    def get(self, task_id: str) -> Contract:
        split_task_id(task_id)
        try:
            return self._by_id[task_id]
        except KeyError:
            raise UnknownTaskError(
                f"unknown task {task_id!r}", hint="list task ids with `jb-client tasks`"
            ) from None

    def list(self, suite: str = "") -> builtins.list[Contract]:
        """Every task, or the tasks of `suite` (an unknown suite is NotFoundError)."""
        found = [c for tid, c in sorted(self._by_id.items()) if not suite or c.suite == suite]
        if suite and not found:
            known = ", ".join(self.suites()) or "none"
            raise NotFoundError(f"no suite {suite!r} on this daemon", hint=f"its suites: {known}")
        return found

    def suites(self) -> builtins.list[str]:
        return sorted({c.suite for c in self._by_id.values()})

    def __len__(self) -> int:
        return len(self._by_id)
