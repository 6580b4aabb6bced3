"""A small Python API over the jouled.v1 gRPC service.

Every call returns plain data (dicts and lists) shaped as the wire formats in
the README; gRPC errors become `ClientError` carrying the daemon's message.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from jb_client.target import default_target, normalise
from jb_client.taskdoc import task_doc as _task

from jouled.documents import FrontierRow, OpReceipt, Receipt
from jouled.errors import JouledError, Kind
from jouled.v1 import jouled_pb2 as pb
from jouled.v1 import jouled_pb2_grpc as pb_grpc

Progress = Callable[[str, str], None]
# Times a paged answer is read again from its first page when the ledger changes meanwhile.
PAGE_RETRIES = 5

_KINDS = {
    grpc.StatusCode.INVALID_ARGUMENT: Kind.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND: Kind.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION: Kind.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Kind.RESOURCE_EXHAUSTED,
    grpc.StatusCode.PERMISSION_DENIED: Kind.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED: Kind.UNAUTHENTICATED,
    grpc.StatusCode.UNAVAILABLE: Kind.UNAVAILABLE,
}


class ClientError(JouledError):
    """The daemon refused a request, or could not be reached."""

    def __init__(self, message: str, kind: Kind, hint: str = "", code: str = "") -> None:
        super().__init__(message, hint=hint)
        self.kind = kind
        self.code = code  # the daemon's reason code, where it sent one ("broken-environment")


def _read_file(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ClientError(
            f"cannot read the {what} {path}: {err.strerror}", Kind.INVALID_ARGUMENT
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


def _write_error(path: Path, err: OSError) -> ClientError:
    return ClientError(
        f"cannot write {err.filename or path}: {err.strerror or err}",
        Kind.INVALID_ARGUMENT,
        hint="check the path and its permissions, and the free space there",
    )


def channel_credentials(
    target: str,
    *,
    token: str = "",
    ca: str | Path | None = None,
    cert: str | Path | None = None,
    key: str | Path | None = None,
    insecure: bool = False,
) -> grpc.ChannelCredentials | None:
    """The credentials a channel to `target` uses; None: a plain Unix-socket channel.

    On the Unix socket the daemon knows the caller by its uid; a token, when given,
    travels too (gRPC's local credentials let call credentials through). Over TCP:
    TLS, trusting `ca` (else the system's roots), with a client certificate for
    mTLS; or, with `insecure`, loopback plaintext. The token goes as a bearer token.
    """
    calls = [grpc.access_token_call_credentials(token)] if token else []
    if target.startswith("unix"):
        if not calls:
            return None
        base = grpc.local_channel_credentials(grpc.LocalConnectionType.UDS)
    elif insecure:
        base = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    else:
        if bool(cert) != bool(key):
            raise ClientError("--cert and --key go together", Kind.INVALID_ARGUMENT)
        base = grpc.ssl_channel_credentials(
            root_certificates=_read_file(ca, "CA certificate") if ca else None,
            private_key=_read_file(key, "client key") if key else None,
            certificate_chain=_read_file(cert, "client certificate") if cert else None,
        )
    return grpc.composite_channel_credentials(base, *calls) if calls else base


class Client:
    def __init__(
        self,
        target: str | None = None,
        *,
        timeout_s: float | None = None,
        token: str | None = None,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        insecure: bool | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """A channel to the daemon; token, CA, mode default to $JB_TOKEN, $JB_CA, $JB_INSECURE."""
        env = os.environ if env is None else env
        self.target = normalise(target or default_target(env))
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
            f"the daemon at {self.target} did not start serving in {timeout_s} s", Kind.UNAVAILABLE
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, err: grpc.RpcError) -> ClientError:
        code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = (err.details() if isinstance(err, grpc.Call) else None) or str(err)
        trailing = dict(err.trailing_metadata() or ()) if isinstance(err, grpc.Call) else {}
        message, _, hint = details.partition("\n  hint: ")
        # The daemon names the kind of every refusal it makes; anything else is the transport.
        if "jouled-error" in trailing:
            reason = trailing.get("jouled-code")
            return ClientError(
                message,
                _KINDS.get(code, Kind.INTERNAL),
                hint=hint,
                code=reason if isinstance(reason, str) else "",
            )
        if code == grpc.StatusCode.UNAVAILABLE and (
            "handshake" in details.lower() or "ssl" in details.lower()
        ):
            return ClientError(
                f"TLS with {self.target} failed: {details}",
                Kind.UNAVAILABLE,
                hint="pass the daemon's CA with --ca / $JB_CA (and --cert/--key when it "
                "wants client certificates)",
            )
        if code == grpc.StatusCode.UNAVAILABLE:
            return ClientError(
                f"cannot reach the daemon at {self.target}: {details}",
                Kind.UNAVAILABLE,
                hint="start it with `jouled serve`, or point --target / $JB_TARGET at it",
            )
        return ClientError(message, _KINDS.get(code, Kind.INTERNAL), hint=hint)

    def _call(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout_s)
        except grpc.RpcError as err:
            raise self._error(err) from None

    def _doc(self, method: Callable[..., Any], request: Any) -> Any:
        return json.loads(self._call(method, request).json)

    # -- tasks ------------------------------------------------------------------------------

    def tasks(self, suite: str = "") -> list[dict[str, Any]]:
        reply = self._call(self._stub.ListTasks, pb.ListTasksRequest(suite=suite))
        return [_task(t) for t in reply.tasks]

    def task(self, task_id: str) -> dict[str, Any]:
        return _task(self._call(self._stub.GetTask, pb.GetTaskRequest(task_id=task_id)))

    def fetch(self, task_id: str, dest: str | Path, *, force: bool = False) -> list[str]:
        """Write a task's pristine tree into `dest`, a new or empty directory (with `force`,
        over what a non-empty one holds); returns the relative paths written."""
        dest = Path(dest)
        _check_fetch_dest(dest, force)
        written = []
        try:
            for f in self._stub.FetchTask(
                pb.FetchTaskRequest(task_id=task_id), timeout=self.timeout_s
            ):
                rel = Path(f.path)
                if rel.is_absolute() or ".." in rel.parts:
                    raise ClientError(
                        f"the daemon sent a file outside the task's tree: {f.path!r}",
                        Kind.INTERNAL,
                    )
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(f.content)
                os.chmod(target, f.mode or 0o644)
                written.append(f.path)
        except grpc.RpcError as err:
            raise self._error(err) from None
        except OSError as err:
            raise _write_error(dest, err) from None
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
    ) -> dict[str, Any]:
        """Grade `patch`. `rollout` None: the daemon numbers it, one above the highest
        index this (task, solver, run) has used, so a second attempt never lands on
        the first's index; the receipt's body says which it got."""
        request = pb.SubmitRequest(
            task_id=task_id,
            patch=patch,
            solver=solver,
            model=model,
            agent=agent,
            run_id=run_id,
            rollout=rollout or 0,
            next_rollout=rollout is None,
            claimed=pb.Claimed(**dict(claimed or {})),
            idempotency_key=idempotency_key or uuid.uuid4().hex,
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
    ) -> dict[str, Any]:
        request = pb.RunSolverRequest(
            task_id=task_id,
            solver=solver,
            run_id=run_id,
            rollout=rollout,
            idempotency_key=idempotency_key or uuid.uuid4().hex,
            model=model,
        )
        return self._attempt(self._stub.RunSolver, request, progress)

    def _attempt(
        self, method: Callable[..., Any], request: Any, progress: Progress | None
    ) -> dict[str, Any]:
        receipt: dict[str, Any] | None = None
        try:
            for event in method(request, timeout=self.timeout_s):
                if event.HasField("progress") and progress:
                    progress(event.progress.phase, event.progress.message)
                elif event.HasField("receipt"):
                    receipt = Receipt.parse(json.loads(event.receipt.json)).to_dict()
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
    ) -> dict[str, Any]:
        request = pb.FrontierRequest(suite=suite, axis=axis, merge_digests=merge_digests)
        doc = self._pages(self._stub.Frontier, request, "frontier")
        doc["rows"] = [
            FrontierRow.parse(row, where=f"frontier row {i}").to_dict()
            for i, row in enumerate(doc["rows"])
        ]
        return doc

    def best_of_k(self, suite: str = "") -> dict[str, Any]:
        return self._pages(self._stub.BestOfK, pb.FrontierRequest(suite=suite), "best-of-k")

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

    def export(self, out: str | Path) -> dict[str, Any]:
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
            raise _write_error(out, err) from None

    def _export(self, out: Path, write_parquet: Callable[[Path, Path], Any]) -> dict[str, Any]:
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
        return {
            "out": str(out),
            "entries": entries,
            "checkpoints": notes,
            "checkpoint_history": str(history),
            "parquet": str(parquet),
        }

    def checkpoint(self) -> dict[str, Any]:
        return dict(self._doc(self._stub.Checkpoint, pb.CheckpointRequest()))

    def proof(self, seq: int, tree_size: int = 0) -> dict[str, Any]:
        return dict(
            self._doc(
                self._stub.InclusionProof, pb.InclusionProofRequest(seq=seq, tree_size=tree_size)
            )
        )

    def consistency(self, old_size: int, new_size: int = 0) -> dict[str, Any]:
        return dict(
            self._doc(
                self._stub.ConsistencyProof,
                pb.ConsistencyProofRequest(old_size=old_size, new_size=new_size),
            )
        )

    def meter(self) -> dict[str, Any]:
        return dict(self._doc(self._stub.MeterStatus, pb.MeterStatusRequest()))

    def register_swebench(self, records: list[dict[str, Any]], suite: str = "") -> dict[str, Any]:
        """Register records against the checkouts under the daemon's --checkout-root."""
        request = pb.RegisterSwebenchRequest(records_json=json.dumps(records), suite=suite)
        return dict(self._doc(self._stub.RegisterSwebench, request))

    def receipt(self, *, idempotency_key: str = "", seq: int | None = None) -> dict[str, Any]:
        """A result's receipt again (fresh proof), by idempotency key or seq."""
        if idempotency_key:
            request = pb.GetReceiptRequest(idempotency_key=idempotency_key)
        elif seq is not None:
            request = pb.GetReceiptRequest(seq=seq)
        else:
            raise ClientError("give an idempotency key or a seq", Kind.INVALID_ARGUMENT)
        return Receipt.parse(json.loads(self._call(self._stub.GetReceipt, request).json)).to_dict()

    def logs(self, seq: int) -> dict[str, Any]:
        """A result's captured output per run and its full failing and missing test ids."""
        return dict(self._doc(self._stub.GetLogs, pb.GetLogsRequest(seq=seq)))

    def public_keys(self) -> dict[str, Any]:
        return dict(self._doc(self._stub.PublicKeys, pb.PublicKeysRequest()))

    def calibrate(self, seconds: int) -> dict[str, Any]:
        return dict(self._doc(self._stub.Calibrate, pb.CalibrateRequest(seconds=seconds)))

    # -- op windows -------------------------------------------------------------------------

    def open_window(
        self, label: str, *, task_id: str = "", run_id: str = "", rollout: int = 0, pid: int = 0
    ) -> OpWindow:
        """Ask the daemon to meter one of this process's own operations from now on.

        Close the window with `OpWindow.close()` (or use `op()`); if this process
        exits first, the daemon signs the window as abandoned.
        """
        request = pb.OpenWindowRequest(
            label=label, task_id=task_id, run_id=run_id, rollout=rollout, pid=pid
        )
        # No deadline: the call lasts as long as the window (the daemon bounds both).
        call = self._stub.OpenWindow(request)
        try:
            event = next(call)
        except grpc.RpcError as err:
            raise self._error(err) from None
        except StopIteration:
            raise ClientError("the daemon ended the call without a window", Kind.INTERNAL) from None
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

    def _close_window(self, window_id: str) -> dict[str, Any]:
        reply = self._call(self._stub.CloseWindow, pb.CloseWindowRequest(window_id=window_id))
        return OpReceipt.parse(json.loads(reply.json)).to_dict()


class OpWindow:
    """An open op window: its id, its attribution, and its receipt once it ends."""

    def __init__(self, client: Client, call: Any, opened: pb.WindowOpened) -> None:
        self._client = client
        self._call = call
        self.id: str = opened.window_id
        self.attribution: str = opened.attribution
        self.max_s: float = opened.max_s
        self.receipt: dict[str, Any] | None = None

    def close(self) -> dict[str, Any]:
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

    def wait(self) -> dict[str, Any]:
        """Block until the window ends, however it ends: its receipt."""
        if self.receipt is not None:
            return self.receipt
        try:
            for event in self._call:
                if event.HasField("closed"):
                    self.receipt = OpReceipt.parse(json.loads(event.closed.json)).to_dict()
                    return self.receipt
        except grpc.RpcError as err:
            raise self._client._error(err) from None
        raise ClientError(
            f"op window {self.id} ended without a receipt",
            Kind.UNAVAILABLE,
            hint="the daemon stopped; an entry it signed is in its ledger",
        )


def checkpoint_history_path(export: Path) -> Path:
    return export.with_name(export.name + ".checkpoints.jsonl")


def parquet_path(export: Path) -> Path:
    return export.with_name(export.name + ".parquet")
