"""SWE-bench Verified records and predictions, read from local files and validated.

A record is one row of the HuggingFace `princeton-nlp/SWE-bench_Verified`
dataset, exported to a local JSON or JSONL file (`load_records`); a prediction
is one candidate patch in the SWE-bench predictions format (`load_predictions`).
Both are validated here, field by field, before anything is compiled to a
contract (`swebench.to_contract`). Nothing here fetches a dataset.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from jouled.errors import TaskError
from jouled.patch import Patch, parse_patch

__all__ = ["Prediction", "SweBenchRecord", "load_predictions", "load_records"]

_REQUIRED_TEXT = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch")
# The fields that list test ids.
TEST_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")
_OPTIONAL_TEXT = (
    "version",
    "environment_setup_commit",
    "created_at",
    "hints_text",
    "test_cmd",
    "log_parser",
)

# An instance id becomes a directory name and the NAME of a SUITE/NAME task id.
_INSTANCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
# SHA-1 object names, or SHA-256 ones for repositories that use them.
OBJECT_NAME = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")

_PREDICTION_KEYS = ("instance_id", "model_name_or_path", "model_patch")


# -- records --------------------------------------------------------------------------


@dataclass(frozen=True)
class SweBenchRecord:
    """One SWE-bench instance, with the dataset's own field names."""

    instance_id: str
    repo: str  # "owner/name" on GitHub
    base_commit: str
    problem_statement: str
    patch: str  # the gold patch
    test_patch: str
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...]
    version: str | None = None
    environment_setup_commit: str | None = None
    created_at: str | None = None
    hints_text: str | None = None
    # The official test command and log parser, where the record carries them; else
    # they come from the specification of `repo` at `version`.
    test_cmd: str | None = None
    log_parser: str | None = None

    @classmethod
    def from_dict(cls, data: object, where: str) -> SweBenchRecord:
        """Validate one decoded record; `where` names it in errors ("file:line", "record 3")."""
        if not isinstance(data, dict):
            raise TaskError(
                f"{where}: a record must be a JSON object, not {_json_type(data)}",
                hint="export the dataset with one JSON object per instance",
            )
        label = where
        if isinstance(data.get("instance_id"), str):
            label = f"{where} ({data['instance_id']})"
        text = {key: _required_text(data, key, label) for key in _REQUIRED_TEXT}
        tests = {key: _test_list(data, key, label) for key in TEST_LISTS}
        optional = {key: _optional_text(data, key, label) for key in _OPTIONAL_TEXT}
        if not _INSTANCE_ID.fullmatch(text["instance_id"]):
            raise TaskError(
                f"{label}: instance_id {text['instance_id']!r} is not a usable name "
                "(letters, digits, '.', '_', '+', '-'; no '/')",
                hint="SWE-bench instance ids look like `astropy__astropy-12907`",
            )
        if not _REPO.fullmatch(text["repo"]):
            raise TaskError(
                f"{label}: repo {text['repo']!r} is not of the form OWNER/NAME",
                hint="SWE-bench repos look like `astropy/astropy`",
            )
        for key in ("base_commit", "environment_setup_commit"):
            value = text.get(key) or optional.get(key)
            if value is not None and not OBJECT_NAME.fullmatch(value):
                raise TaskError(
                    f"{label}: {key} {value!r} is not a full git commit id "
                    "(40 or 64 hexadecimal digits)",
                )
        return cls(
            instance_id=text["instance_id"],
            repo=text["repo"],
            base_commit=text["base_commit"].lower(),
            problem_statement=text["problem_statement"],
            patch=text["patch"],
            test_patch=text["test_patch"],
            FAIL_TO_PASS=tests["FAIL_TO_PASS"],
            PASS_TO_PASS=tests["PASS_TO_PASS"],
            version=optional["version"],
            environment_setup_commit=optional["environment_setup_commit"],
            created_at=optional["created_at"],
            hints_text=optional["hints_text"],
            test_cmd=optional["test_cmd"],
            log_parser=optional["log_parser"],
        )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _required_text(data: Mapping[str, Any], key: str, where: str) -> str:
    if key not in data or data[key] is None:
        raise TaskError(f"{where}: missing field {key}")
    value = data[key]
    if not isinstance(value, str):
        raise TaskError(f"{where}: field {key} must be a string, not {_json_type(value)}")
    if not value.strip():
        raise TaskError(f"{where}: field {key} is empty")
    return value


def _optional_text(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    # Dataframe exports turn "3.0" into 3.0 and dates into epoch numbers;
    # these fields are provenance only, so keep what is there.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise TaskError(f"{where}: field {key} must be a string, not {_json_type(value)}")


def _test_list(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    """A list of test ids; the dataset stores it as a JSON-encoded string."""
    if key not in data or data[key] is None:
        raise TaskError(f"{where}: missing field {key}")
    value = data[key]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise TaskError(
                f"{where}: field {key} is a string but not a JSON-encoded list: {err}",
                hint='the dataset stores it as a JSON string such as "[\\"tests/test_x.py::t\\"]"',
            ) from None
    if not isinstance(value, list):
        raise TaskError(f"{where}: field {key} must be a list of test ids, not {_json_type(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise TaskError(
                f"{where}: field {key}[{index}] must be a non-empty test id string, "
                f"not {_json_type(item) if not isinstance(item, str) else 'an empty string'}"
            )
    return tuple(value)


def _read_text(path: Path, what: str) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TaskError(f"{what} file {path} does not exist") from None
    except IsADirectoryError:
        raise TaskError(f"{what} file {path} is a directory") from None
    except OSError as err:
        raise TaskError(f"cannot read {what} file {path}: {err.strerror}") from err
    try:
        # Tolerate a byte order mark: some exporters on Windows write one.
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise TaskError(f"{path}: not UTF-8 text (byte {err.start})") from None


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _documents(
    path: Path, what: str, bad: list[TaskError] | None = None
) -> Iterator[tuple[str, object]]:
    """(where, decoded value) for each JSON value in a JSON or JSONL file.

    A file that parses as one JSON value is that value (an array yields its
    items); otherwise every non-blank line must be one JSON value. With `bad`,
    a JSONL line that is not JSON is added there and skipped instead of refused.
    """
    text = _read_text(path, what)
    if not text.strip():
        raise TaskError(f"{path}: the file is empty", hint=f"give a JSON or JSONL file of {what}s")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as err:
        # "Extra data" after a complete first value is what JSONL looks like to json.loads.
        lines = bad is not None and "\n" in text.strip()
        if err.msg != "Extra data" and not lines:
            row, col = _line_col(text, err.pos)
            raise TaskError(f"{path}:{row}:{col}: not valid JSON: {err.msg}") from None
    else:
        if isinstance(whole, list):
            if not whole:
                raise TaskError(f"{path}: the JSON array is empty")
            for index, item in enumerate(whole):
                yield f"{path}: record {index}", item
        else:
            yield str(path), whole
        return
    found = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            refused = TaskError(
                f"{path}:{lineno}: not valid JSON: {err.msg} (column {err.colno})",
                hint="JSONL needs exactly one JSON object per line",
            )
            if bad is None:
                raise refused from None
            bad.append(refused)
            continue
        found = True
        yield f"{path}:{lineno}", value
    if not found:
        raise TaskError(f"{path}: no records")


def load_records(path: Path) -> list[SweBenchRecord]:
    """Records from a local JSON array, a single JSON object, or JSONL. Never fetches anything."""
    records: list[SweBenchRecord] = []
    seen: dict[str, str] = {}
    for where, value in _documents(Path(path), "SWE-bench dataset"):
        record = SweBenchRecord.from_dict(value, where)
        if record.instance_id in seen:
            raise TaskError(
                f"{where}: instance {record.instance_id} appears twice "
                f"(first at {seen[record.instance_id]})"
            )
        seen[record.instance_id] = where
        records.append(record)
    return records


# -- predictions ----------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """One candidate patch in the SWE-bench predictions format."""

    instance_id: str
    model_name_or_path: str
    model_patch: str | None  # None or blank: the model produced no patch

    def to_patch(self) -> Patch | None:
        """The parsed candidate, None when there is none; a PatchError rejects it."""
        if self.model_patch is None or not self.model_patch.strip():
            return None
        return parse_patch(self.model_patch.encode("utf-8", errors="surrogateescape"))


def _prediction(data: object, where: str, key: str | None = None) -> Prediction:
    if not isinstance(data, dict):
        raise TaskError(f"{where}: a prediction must be a JSON object, not {_json_type(data)}")
    if key is not None:
        # A dict keyed by instance id may leave the id out of the value.
        data = {"instance_id": key, **data}
        if data["instance_id"] != key:
            raise TaskError(
                f"{where}: keyed {key!r} but its instance_id is {data['instance_id']!r}"
            )
    missing = [k for k in _PREDICTION_KEYS if k not in data]
    if missing:
        raise TaskError(
            f"{where}: missing field {', '.join(missing)}",
            hint="each prediction needs instance_id, model_name_or_path and model_patch",
        )
    instance_id, model, patch = (data[k] for k in _PREDICTION_KEYS)
    if not isinstance(instance_id, str) or not _INSTANCE_ID.fullmatch(instance_id):
        raise TaskError(f"{where}: instance_id {instance_id!r} is not a SWE-bench instance id")
    if not isinstance(model, str):
        raise TaskError(
            f"{where}: field model_name_or_path must be a string, not {_json_type(model)}"
        )
    if patch is not None and not isinstance(patch, str):
        raise TaskError(
            f"{where}: field model_patch must be a string or null, not {_json_type(patch)}"
        )
    return Prediction(instance_id, model, patch)


def load_predictions(path: Path, malformed: list[TaskError] | None = None) -> dict[str, Prediction]:
    """Predictions by instance id, from a JSON list, JSONL, or a JSON object keyed by id.

    A single prediction object is accepted too. An instance predicted twice is
    refused rather than silently keeping one of the two. With `malformed`, a
    prediction that is refused (or a JSONL line that is not JSON) is added there
    and skipped, and the others load; a file that cannot be read still raises.
    """
    found: dict[str, Prediction] = {}
    origin: dict[str, str] = {}

    def add(build: Callable[[], Prediction], where: str) -> None:
        try:
            prediction = build()
            if prediction.instance_id in found:
                raise TaskError(
                    f"{where}: instance {prediction.instance_id} is predicted twice "
                    f"(first at {origin[prediction.instance_id]})"
                )
        except TaskError as err:
            if malformed is None:
                raise
            malformed.append(err)
            return
        found[prediction.instance_id] = prediction
        origin[prediction.instance_id] = where

    for where, value in _documents(Path(path), "predictions", malformed):
        keyed = (
            isinstance(value, dict)
            and bool(value)
            and "instance_id" not in value
            and all(isinstance(v, dict) for v in value.values())
        )
        if keyed:
            assert isinstance(value, dict)
            for key, item in value.items():
                at = f"{where}: key {key!r}"
                add(partial(_prediction, item, at, key), at)
        else:
            add(partial(_prediction, value, where), where)
    return found
