"""SWE-bench records registered as tasks: compiled against the checkout root, kept, replayed.

A record names an instance, never a path: its tree is CHECKOUT_ROOT/<instance_id>.
Each registration is appended to the data dir's registrations file and compiled
again when the daemon starts.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from jouled import limits
from jouled.contracts import TaskRegistry, swebench
from jouled.contracts.swebench_records import SweBenchRecord
from jouled.documents.answers import Registration, SkippedRecord
from jouled.errors import JouledError, PreconditionError, UsageError

log = logging.getLogger("jouled")


class Registrations:
    def __init__(
        self,
        registry: TaskRegistry,
        path: Path,
        root: Path | None,
        *,
        environments: Path | None,
        trees: swebench.TreeDigests,
        images: swebench.Images | None,
    ) -> None:
        self.registry = registry
        self.path = path
        self.root = root
        self.environments = environments
        self.trees = trees
        self.images = images

    def register(self, records: list[dict[str, Any]], suite: str = "") -> dict[str, Any]:
        """Compile SWE-bench records against the checkouts under --checkout-root into tasks.

        A record names an instance, never a path: its tree is CHECKOUT_ROOT/<instance_id>,
        and must resolve inside the root. Registrations are kept in the data dir and
        replayed at start.
        """
        root = self._checkout_root()
        suite = limits.name("suite", suite or swebench.DEFAULT_SUITE)
        if len(records) > limits.SWEBENCH_RECORDS_MAX:
            raise UsageError(
                f"{len(records)} records in one request; the limit is "
                f"{limits.SWEBENCH_RECORDS_MAX}",
                hint="register them in batches",
            )
        registered: list[str] = []
        skipped: list[SkippedRecord] = []
        new: list[dict[str, Any]] = []
        for i, raw in enumerate(records):
            record = SweBenchRecord.from_dict(raw, f"record {i}")
            iid = record.instance_id
            try:
                limits.name("instance_id", iid)
                if "/" in iid:
                    raise UsageError(f"instance_id {iid!r} holds '/'")
                self._inside(root, iid)
                contract = swebench.to_contract(
                    record,
                    root,
                    suite=suite,
                    environments=self.environments,
                    trees=self.trees,
                    images=self.images,
                )
                if self.registry.register(contract):
                    new.append({"suite": suite, "record": raw})
            except JouledError as err:
                code = err.code if isinstance(err, swebench.Unsupported) else "refused"
                skipped.append(
                    SkippedRecord(instance_id=iid[: limits.NAME_MAX], reason=err.message, code=code)
                )
                continue
            registered.append(contract.task_id)
        if new:
            self._save(new)
        return Registration(registered=registered, skipped=skipped).to_dict()

    def _checkout_root(self) -> Path:
        root = self.root
        if root is None:
            raise PreconditionError(
                "this daemon has no checkout root, so it cannot register SWE-bench records",
                hint="start jouled with --checkout-root DIR holding one checkout per "
                "instance id (DIR/<instance_id>)",
            )
        if not root.is_dir():
            raise PreconditionError(
                f"the checkout root {root} is not a directory on the daemon's host",
                hint="clone each instance's repository at its base_commit into "
                "CHECKOUT_ROOT/<instance_id> on the metered host",
            )
        return root

    @staticmethod
    def _inside(root: Path, instance_id: str) -> None:
        tree = (root / instance_id).resolve()
        if not tree.is_relative_to(root.resolve()):
            raise UsageError(
                f"the checkout of {instance_id} resolves to {tree}, outside the checkout root",
                hint="a checkout must be a directory under the checkout root, not a link out",
            )

    def _save(self, items: list[dict[str, Any]]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            for item in items:
                fh.write(json.dumps(item, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def load(self) -> None:
        path = self.path
        if not path.is_file():
            return
        root = self.root
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                if root is None:
                    raise PreconditionError("no --checkout-root")
                record = SweBenchRecord.from_dict(item["record"], f"{path}:{n}")
                self._inside(root, record.instance_id)
                self.registry.register(
                    swebench.to_contract(
                        record,
                        root,
                        suite=item["suite"],
                        environments=self.environments,
                        trees=self.trees,
                        images=self.images,
                    )
                )
            except (ValueError, KeyError, TypeError, JouledError) as err:
                message = err.message if isinstance(err, JouledError) else repr(err)
                log.warning("%s:%d: SWE-bench registration not restored: %s", path, n, message)
