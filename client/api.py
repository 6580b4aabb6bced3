"""A small Python API over the jouled.v1 gRPC service.

Every call returns a typed document (`jb_client.documents`: `Receipt`,
`TaskInfo`, `Frontier`, ...; energy in joules through `Energy`) whose
`.to_dict()` is the wire form the README and `jb-client --json` show. Every
failure, the daemon's refusals included, is a `ClientError` with a `kind` and
a hint saying what to do about it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from jb_client.arguments import check_claimed, check_count, check_text, fresh_key
from jb_client.channel import channel_credentials
from jb_client.errors import ClientError, rpc_error, write_error
from jb_client.later import Later
from jb_client.paths import checkpoint_history_path, parquet_path
from jb_client.target import default_target, normalise, problem
from jb_client.taskinfo import TaskInfo

from jouled.errors import DocumentError, Kind
from jouled.limits import CALIBRATE_MAX_S, ROLLOUT_MAX
from jouled.v1 import jouled_pb2 as pb
from jouled.v1 import jouled_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from jb_client import documents as docs
    from jb_client.documents import (
        Answer,
        BestOfK,
        Calibration,
        Checkpoint,
        ConsistencyProof,
        ExportSummary,
        Frontier,
        InclusionProof,
        Logs,
        MeterStatus,
        OpReceipt,
        PublicKeys,
        Receipt,
        Registration,
    )
else:
    # The documents (and jouled.documents under them) load with the first answer that
    # needs them: `jb-client tasks --json` never does.
    docs = Later("jb_client.documents")

Progress = Callable[[str, str], None]
# Times a paged answer is read again from its first page when the ledger changes meanwhile.
PAGE_RETRIES = 5

A = TypeVar("A", bound="Answer")


def _answer(cls: type[A], data: Any) -> A:
    """The daemon's answer as its typed document; one of another shape is a ClientError."""
    try:
        return cls.parse(data)
    except DocumentError as err:
        raise ClientError(
            f"the daemon's answer is not a {cls.NAME} this client reads: {err.message}",
            Kind.INTERNAL,
            hint="the daemon may be newer than this jb_client: upgrade joule-bench",
        ) from None


def _check_fetch_dest(dest: Path, force: bool) -> None:
    """Refuse a destination a fetch would merge into or overwrite, unless asked to."""
    if dest.exists() and not dest.is_dir():
        raise ClientError(
            f"cannot fetch into {dest}: it exists and is not a directory",
            Kind.INVALID_ARGUMENT,
            hint="choose a new directory for --out",
        )
    if dest.is_dir() and not force and any(dest.iterdir()):
        raise ClientError(
            f"{dest} is not empty: fetching into it would overwrite edits or mix two trees",
            Kind.INVALID_ARGUMENT,
            hint="choose a new or empty directory for --out, or pass --force to write over it",
        )


class _ClosedStub:
    """What a closed client's calls reach: a ClientError each, not gRPC's ValueError."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def closed(*args: Any, **kwargs: Any) -> Any:
            raise ClientError(
                "this client is closed",
                Kind.FAILED_PRECONDITION,
                hint="make a new Client; `with Client() as c:` closes it as the block ends",
            )

        return closed


class Client:
    def __init__(
        self,
        target: str | Path | None = None,
        *,
        timeout_s: float | None = None,
        token: str | None = None,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        insecure: bool | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """A channel to the daemon at `target` (unix:PATH, a socket's path, or HOST:PORT;
        default $JB_TARGET, else the default socket). Token, CA, mode default to
        $JB_TOKEN, $JB_CA, $JB_INSECURE. Nothing is sent until the first call."""
        env = os.environ if env is None else env
        self.target = normalise(str(target) if target else default_target(env))
        wrong = problem(self.target)
        if wrong is not None:
            raise ClientError(
                f"target {self.target!r} is {wrong}",
                Kind.INVALID_ARGUMENT,
                hint="give unix:PATH, a socket's absolute path, or HOST:PORT with a port "
                "from 1 to 65535 (--target or $JB_TARGET)",
            )
        if timeout_s is not None and not (isinstance(timeout_s, int | float) and timeout_s > 0):
            raise ClientError(
                f"timeout_s must be a positive number of seconds, not {timeout_s!r}",
                Kind.INVALID_ARGUMENT,
                hint="give timeout_s in seconds (e.g. 30), or None to wait as long as a call takes",
            )
        self.timeout_s = timeout_s
        creds = channel_credentials(
            self.target,
            token=env.get("JB_TOKEN", "") if token is None else token,
            ca=ca or env.get("JB_CA") or None,
            cert=cert or env.get("JB_CERT") or None,
            key=key or env.get("JB_KEY") or None,
            insecure=env.get("JB_INSECURE", "") not in ("", "0") if insecure is None else insecure,
        )
        options = [
            ("grpc.max_receive_message_length", 16 << 20),
            ("grpc.max_send_message_length", 16 << 20),
        ]
        if creds is None:
            self._channel = grpc.insecure_channel(self.target, options=options)
        else:
            self._channel = grpc.secure_channel(self.target, creds, options=options)
        self._stub = pb_grpc.JouledStub(self._channel)

    def close(self) -> None:
        self._channel.close()
        self._stub = _ClosedStub()  # type: ignore[assignment]

    def wait_ready(self, timeout_s: float = 60, alive: Callable[[], bool] | None = None) -> None:
        """Block until the daemon's health service says SERVING.

        `alive` (e.g. a check that a just-started daemon process still runs)
        ends the wait early when it turns false. Raises ClientError on timeout.
        """
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        stub = health_pb2_grpc.HealthStub(self._channel)
        request = health_pb2.HealthCheckRequest(service="")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if alive is not None and not alive():
                raise ClientError(
                    f"the daemon at {self.target} exited while starting",
                    Kind.UNAVAILABLE,
                    hint="see its log for why",
                )
            try:
                reply = stub.Check(request, timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
        raise ClientError(
            f"the daemon at {self.target} did not start serving in {timeout_s} s",
            Kind.UNAVAILABLE,
            hint="check that it runs (its log says why it stopped), or wait longer",
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, err: grpc.RpcError) -> ClientError:
        return rpc_error(err, self.target, self.timeout_s)

    def _call(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout_s)
        except grpc.RpcError as err:
            raise self._error(err) from None

    def _doc(self, method: Callable[..., Any], request: Any) -> Any:
        return json.loads(self._call(method, request).json)

    # -- tasks ------------------------------------------------------------------------------

    def tasks(self, suite: str = "") -> list[TaskInfo]:
        """The tasks the daemon serves, in every suite or in `suite`."""
        reply = self._call(
            self._stub.ListTasks, pb.ListTasksRequest(suite=check_text("suite", suite))
        )
        return [TaskInfo.of(t) for t in reply.tasks]

    def solvers(self) -> list[str]:
        """The solvers the daemon hosts (`run_solver`): its built-ins and declared agent CLIs."""
        return list(self._call(self._stub.ListTasks, pb.ListTasksRequest()).solvers)

    def task(self, task_id: str) -> TaskInfo:
        """One task: its prompt, digest, tests and protected paths."""
        request = pb.GetTaskRequest(task_id=check_text("task_id", task_id))
        return TaskInfo.of(self._call(self._stub.GetTask, request))

    def fetch(self, task_id: str, dest: str | Path, *, force: bool = False) -> list[str]:
        """Write a task's pristine tree into `dest`, a new or empty directory (with `force`,
        over what a non-empty one holds); returns the relative paths written."""
        dest = Path(dest)
        _check_fetch_dest(dest, force)
        request = pb.FetchTaskRequest(task_id=check_text("task_id", task_id))
        written = []
        try:
            for f in self._stub.FetchTask(request, timeout=self.timeout_s):
                rel = Path(f.path)
                if rel.is_absolute() or ".." in rel.parts:
                    raise ClientError(
                        f"the daemon sent a file outside the task's tree: {f.path!r}",
                        Kind.INTERNAL,
                        hint="nothing was written outside the destination; report this daemon",
                    )
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(f.content)
                os.chmod(target, f.mode or 0o644)
                written.append(f.path)
        except grpc.RpcError as err:
            raise self._error(err) from None
        except OSError as err:
            raise write_error(dest, err) from None
        return written

    # -- attempts ---------------------------------------------------------------------------

    def submit(
        self,
        task_id: str,
        patch: bytes,
        *,
        solver: str = "",
        model: str = "",
        agent: str = "",
        run_id: str = "",
        rollout: int | None = None,
        claimed: Mapping[str, int] | None = None,
        idempotency_key: str = "",
        progress: Progress | None = None,
    ) -> Receipt:
        """Grade `patch` (a unified diff's bytes) against `task_id`: the signed receipt.

        `rollout` None: the daemon numbers it, one above the highest index this
        (task, solver, model, run) has used, so a second attempt never lands on the first's
        index; the receipt's body says which it got. `claimed`: the agent's own
        figures, `tokens_in`, `tokens_out`, `usd_micros`, `joules_mj` (whole numbers),
        signed as claimed. `progress(phase, message)` sees the daemon's progress.
        """
        if not isinstance(patch, bytes | bytearray):
            raise ClientError(
                f"the patch must be bytes, not {type(patch).__name__}",
                Kind.INVALID_ARGUMENT,
                hint="read it with Path(...).read_bytes(), or encode the diff's text",
            )
        request = pb.SubmitRequest(
            task_id=check_text("task_id", task_id),
            patch=bytes(patch),
            solver=check_text("solver", solver),
            model=check_text("model", model),
            agent=check_text("agent", agent),
            run_id=check_text("run_id", run_id),
            rollout=0 if rollout is None else check_count("rollout", rollout, ROLLOUT_MAX),
            next_rollout=rollout is None,
            claimed=pb.Claimed(**check_claimed(claimed)),
            idempotency_key=check_text("idempotency_key", idempotency_key) or fresh_key(),
        )
        return self._attempt(self._stub.Submit, request, progress)

    def run_solver(
        self,
        task_id: str,
        solver: str,
        *,
        run_id: str = "",
        rollout: int = 0,
        idempotency_key: str = "",
        progress: Progress | None = None,
        model: str = "",
    ) -> Receipt:
        """Have the daemon's hosted `solver` (`reference`, `noop`, a declared agent CLI)
        attempt `task_id` (operators only): the signed receipt."""
        request = pb.RunSolverRequest(
            task_id=check_text("task_id", task_id),
            solver=check_text("solver", solver),
            run_id=check_text("run_id", run_id),
            rollout=check_count("rollout", rollout, ROLLOUT_MAX),
            idempotency_key=check_text("idempotency_key", idempotency_key) or fresh_key(),
            model=check_text("model", model),
        )
        return self._attempt(self._stub.RunSolver, request, progress)

    def _attempt(
        self, method: Callable[..., Any], request: Any, progress: Progress | None
    ) -> Receipt:
        receipt: Receipt | None = None
        try:
            for event in method(request, timeout=self.timeout_s):
                if event.HasField("progress") and progress:
                    progress(event.progress.phase, event.progress.message)
                elif event.HasField("receipt"):
                    receipt = _answer(docs.Receipt, json.loads(event.receipt.json))
        except grpc.RpcError as err:
            raise self._error(err) from None
        if receipt is None:
            raise ClientError(
                "the daemon closed the stream without a receipt",
                Kind.INTERNAL,
                hint="retry with the same idempotency key",
            )
        return receipt

    # -- reading ----------------------------------------------------------------------------

    def frontier(
        self, suite: str = "", axis: str = "joules", *, merge_digests: bool = False
    ) -> Frontier:
        """Every frontier row (`axis`: joules, usd or wall), all pages read."""
        request = pb.FrontierRequest(
            suite=check_text("suite", suite),
            axis=check_text("axis", axis),
            merge_digests=merge_digests,
        )
        return _answer(docs.Frontier, self._pages(self._stub.Frontier, request, "frontier"))

    def best_of_k(self, suite: str = "") -> BestOfK:
        """Every best-of-k row, all pages read."""
        request = pb.FrontierRequest(suite=check_text("suite", suite))
        return _answer(docs.BestOfK, self._pages(self._stub.BestOfK, request, "best-of-k"))

    def _pages(self, method: Callable[..., Any], request: Any, what: str) -> dict[str, Any]:
        """Every page of a paged answer, as one document with all the rows.

        Pages of one ledger state fit together; when a result is signed between two
        pages (the answer's `version` changes), the rows are read again from the start.
        """
        for _ in range(PAGE_RETRIES):
            request.page_token = ""
            rows: list[Any] = []
            version = None
            while True:
                doc = dict(self._doc(method, request))
                page = doc.get("rows")
                if not isinstance(page, list):
                    raise ClientError(f"the daemon's {what} has no rows", Kind.INTERNAL)
                if version is not None and doc.get("version") != version:
                    break  # the ledger changed under the pages: start again
                version = doc.get("version")
                rows.extend(page)
                request.page_token = str(doc.get("next_page_token") or "")
                if not request.page_token:
                    doc["rows"] = rows
                    doc.pop("next_page_token", None)
                    return doc
        raise ClientError(
            f"the daemon's {what} changed while its pages were read, {PAGE_RETRIES} times",
            Kind.UNAVAILABLE,
            hint="retry when fewer results are being signed",
        )

    def export_stream(self) -> Iterator[tuple[str, str]]:
        """("entry", line) for every entry in seq order, then ("checkpoint", note)."""
        try:
            for chunk in self._stub.Export(pb.ExportRequest(), timeout=self.timeout_s):
                kind = chunk.WhichOneof("item")
                yield kind, getattr(chunk, kind)
        except grpc.RpcError as err:
            raise self._error(err) from None

    def export(self, out: str | Path) -> ExportSummary:
        """Write the entries to `out` (JSONL), the checkpoint history and a Parquet snapshot."""
        from jouled.ledger.snapshot import write_parquet  # DuckDB loads only when exporting

        out = Path(out)
        if not out.parent.is_dir():
            raise ClientError(
                f"cannot write the export {out}: {out.parent} is not a directory",
                Kind.INVALID_ARGUMENT,
                hint="create the directory first, or choose another --out",
            )
        if out.is_dir():
            raise ClientError(
                f"cannot write the export {out}: it is a directory",
                Kind.INVALID_ARGUMENT,
                hint="name a file, e.g. --out ledger.jsonl",
            )
        try:
            return self._export(out, write_parquet)
        except OSError as err:
            raise write_error(out, err) from None

    def _export(self, out: Path, write_parquet: Callable[[Path, Path], Any]) -> ExportSummary:
        history = checkpoint_history_path(out)
        tmp_out, tmp_hist = (
            out.with_name(out.name + ".tmp"),
            history.with_name(history.name + ".tmp"),
        )
        entries = notes = 0
        with tmp_out.open("w", encoding="utf-8") as fo, tmp_hist.open("w", encoding="utf-8") as fh:
            for kind, value in self.export_stream():
                if kind == "entry":
                    fo.write(value + "\n")
                    entries += 1
                else:
                    fh.write(json.dumps({"note": value}) + "\n")
                    notes += 1
        os.replace(tmp_out, out)
        os.replace(tmp_hist, history)
        parquet = parquet_path(out)
        write_parquet(out, parquet)
        return docs.ExportSummary(
            out=str(out),
            entries=entries,
            checkpoints=notes,
            checkpoint_history=str(history),
            parquet=str(parquet),
        )

    def checkpoint(self) -> Checkpoint:
        """The latest signed checkpoint."""
        return _answer(docs.Checkpoint, self._doc(self._stub.Checkpoint, pb.CheckpointRequest()))

    def proof(self, seq: int, tree_size: int = 0) -> InclusionProof:
        """That entry `seq` is in the tree of `tree_size` entries (0: the current size)."""
        request = pb.InclusionProofRequest(
            seq=check_count("seq", seq), tree_size=check_count("tree_size", tree_size)
        )
        return _answer(docs.InclusionProof, self._doc(self._stub.InclusionProof, request))

    def consistency(self, old_size: int, new_size: int = 0) -> ConsistencyProof:
        """That the tree of `old_size` entries is a prefix of that of `new_size` (0: now)."""
        request = pb.ConsistencyProofRequest(
            old_size=check_count("old_size", old_size), new_size=check_count("new_size", new_size)
        )
        return _answer(docs.ConsistencyProof, self._doc(self._stub.ConsistencyProof, request))

    def meter(self) -> MeterStatus:
        """What the daemon meters energy with, and the idle calibration in use."""
        return _answer(docs.MeterStatus, self._doc(self._stub.MeterStatus, pb.MeterStatusRequest()))

    def register_swebench(self, records: list[dict[str, Any]], suite: str = "") -> Registration:
        """Register records against the checkouts under the daemon's --checkout-root."""
        try:
            records_json = json.dumps(records, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise ClientError(
                f"the records are not JSON: {err}",
                Kind.INVALID_ARGUMENT,
                hint="give a list of SWE-bench records as read from the dataset's JSON",
            ) from None
        request = pb.RegisterSwebenchRequest(
            records_json=records_json, suite=check_text("suite", suite)
        )
        return _answer(docs.Registration, self._doc(self._stub.RegisterSwebench, request))

    def receipt(self, *, idempotency_key: str = "", seq: int | None = None) -> Receipt:
        """A result's receipt again (fresh proof), by idempotency key or seq."""
        if idempotency_key:
            request = pb.GetReceiptRequest(
                idempotency_key=check_text("idempotency_key", idempotency_key)
            )
        elif seq is not None:
            request = pb.GetReceiptRequest(seq=check_count("seq", seq))
        else:
            raise ClientError(
                "give an idempotency key or a seq",
                Kind.INVALID_ARGUMENT,
                hint="receipt(idempotency_key=KEY) or receipt(seq=N)",
            )
        return _answer(docs.Receipt, json.loads(self._call(self._stub.GetReceipt, request).json))

    def logs(self, seq: int) -> Logs:
        """A result's captured output per run and its full failing and missing test ids."""
        request = pb.GetLogsRequest(seq=check_count("seq", seq))
        return _answer(docs.Logs, self._doc(self._stub.GetLogs, request))

    def public_keys(self) -> PublicKeys:
        """The daemon's signing keys: a convenience, never a root of trust (pin keys)."""
        return _answer(docs.PublicKeys, self._doc(self._stub.PublicKeys, pb.PublicKeysRequest()))

    def calibrate(self, seconds: int) -> Calibration:
        """Measure the host's idle power for `seconds` (operators only): signed."""
        request = pb.CalibrateRequest(seconds=check_count("seconds", seconds, CALIBRATE_MAX_S))
        return _answer(docs.Calibration, self._doc(self._stub.Calibrate, request))

    # -- op windows -------------------------------------------------------------------------

    def open_window(
        self, label: str, *, task_id: str = "", run_id: str = "", rollout: int = 0, pid: int = 0
    ) -> OpWindow:
        """Ask the daemon to meter one of this process's own operations from now on.

        Close the window with `OpWindow.close()` (or use `op()`); if this process
        exits first, the daemon signs the window as abandoned.
        """
        request = pb.OpenWindowRequest(
            label=check_text("label", label),
            task_id=check_text("task_id", task_id),
            run_id=check_text("run_id", run_id),
            rollout=check_count("rollout", rollout, ROLLOUT_MAX),
            pid=check_count("pid", pid, 2**32 - 1),
        )
        # No deadline: the call lasts as long as the window (the daemon bounds both).
        call = self._stub.OpenWindow(request)
        try:
            event = next(call)
        except grpc.RpcError as err:
            raise self._error(err) from None
        except StopIteration:
            raise ClientError(
                "the daemon ended the call without a window",
                Kind.INTERNAL,
                hint="retry; the daemon's log says why",
            ) from None
        return OpWindow(self, call, event.opened)

    @contextmanager
    def op(
        self, label: str, *, task_id: str = "", run_id: str = "", rollout: int = 0, pid: int = 0
    ) -> Iterator[OpWindow]:
        """Meter the block as one operation; its signed receipt is `window.receipt` after.

        The window is closed however the block ends: the energy was spent either way.
        """
        window = self.open_window(label, task_id=task_id, run_id=run_id, rollout=rollout, pid=pid)
        try:
            yield window
        finally:
            window.close()

    def _close_window(self, window_id: str) -> OpReceipt:
        reply = self._call(self._stub.CloseWindow, pb.CloseWindowRequest(window_id=window_id))
        return _answer(docs.OpReceipt, json.loads(reply.json))


class OpWindow:
    """An open op window: its id, its attribution, and its receipt once it ends."""

    def __init__(self, client: Client, call: Any, opened: pb.WindowOpened) -> None:
        self._client = client
        self._call = call
        self.id: str = opened.window_id
        self.attribution: str = opened.attribution
        self.max_s: float = opened.max_s
        self.receipt: OpReceipt | None = None

    def close(self) -> OpReceipt:
        """Close the window: the receipt of its signed `op` entry (idempotent)."""
        if self.receipt is not None:
            return self.receipt
        try:
            self.receipt = self._client._close_window(self.id)
        except ClientError as err:
            if err.kind != Kind.NOT_FOUND:
                raise
            # The daemon closed it first (it outlived its maximum): its call carries the receipt.
            return self.wait()
        self._call.cancel()
        return self.receipt

    def wait(self) -> OpReceipt:
        """Block until the window ends, however it ends: its receipt."""
        if self.receipt is not None:
            return self.receipt
        try:
            for event in self._call:
                if event.HasField("closed"):
                    self.receipt = _answer(docs.OpReceipt, json.loads(event.closed.json))
                    return self.receipt
        except grpc.RpcError as err:
            raise self._client._error(err) from None
        raise ClientError(
            f"op window {self.id} ended without a receipt",
            Kind.UNAVAILABLE,
            hint="the daemon stopped; an entry it signed is in its ledger",
        )
