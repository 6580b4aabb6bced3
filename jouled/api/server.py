"""The gRPC servicer: translate the request, call the library, translate the answer.

Library errors become status codes with the library's own message and hint,
so a caller learns what was wrong and what to do; an unexpected exception is
logged and answered INTERNAL while the daemon keeps serving.
"""

from __future__ import annotations

import json
import logging
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from jouled.config import Config
from jouled.contracts import Contract
from jouled.daemon import Daemon, Submission
from jouled.errors import ConfigError, JouledError, Kind, UsageError
from jouled.v1 import jouled_pb2 as pb
from jouled.v1 import jouled_pb2_grpc as pb_grpc

log = logging.getLogger("jouled")

STATUS = {
    Kind.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Kind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Kind.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    Kind.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Kind.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    Kind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Kind.INTERNAL: grpc.StatusCode.INTERNAL,
}
MAX_MESSAGE = 16 << 20  # above the patch bound, so an oversized patch meets our own error

T = TypeVar("T")


def _abort(context: grpc.ServicerContext, err: BaseException) -> None:
    if isinstance(err, JouledError):
        context.abort(STATUS[err.kind], err.diagnostics())
    log.error("unexpected error serving a request", exc_info=err)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error: {err}; see the daemon's log")


def _unary(fn: Callable[..., T]) -> Callable[..., T]:
    def wrapper(self: Servicer, request: Any, context: grpc.ServicerContext) -> T:
        try:
            return fn(self, request, context)
        except Exception as err:
            _abort(context, err)
            raise  # unreachable: abort raises

    return wrapper


def _doc(value: Any) -> pb.Document:
    # Documents are reports (floats allowed); only signed payloads are canonical.
    return pb.Document(json=json.dumps(value, sort_keys=True, allow_nan=False))


def _task(c: Contract) -> pb.Task:
    return pb.Task(
        task_id=c.task_id,
        suite=c.suite,
        name=c.name,
        prompt=c.prompt,
        digest=c.digest,
        test_cmd=list(c.test_cmd),
        test_files=list(c.test_files),
        timeout_s=c.timeout_s,
        fail_to_pass=list(c.fail_to_pass or ()),
        pass_to_pass=list(c.pass_to_pass or ()),
        source=c.source,
        license=c.license,
        kind=c.kind,
        hidden_files=c.hidden_count,
    )


def _receipt(r: dict[str, Any]) -> pb.Receipt:
    return pb.Receipt(
        seq=r["seq"],
        task_id=r["task_id"],
        patch_sha256=r["patch_sha256"],
        status=r["status"],
        resolved=r["resolved"],
        leaf_hash=r["leaf_hash"],
        json=json.dumps(r, sort_keys=True),
    )


class Servicer(pb_grpc.JouledServicer):
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    @_unary
    def ListTasks(self, request: pb.ListTasksRequest, context: Any) -> pb.ListTasksResponse:
        return pb.ListTasksResponse(tasks=[_task(c) for c in self.daemon.tasks(request.suite)])

    @_unary
    def GetTask(self, request: pb.GetTaskRequest, context: Any) -> pb.Task:
        return _task(self.daemon.task(request.task_id))

    def FetchTask(self, request: pb.FetchTaskRequest, context: Any) -> Iterator[pb.TaskFile]:
        try:
            for path, content, mode in self.daemon.task_files(request.task_id):
                yield pb.TaskFile(path=path, content=content, mode=mode)
        except Exception as err:
            _abort(context, err)

    def Submit(self, request: pb.SubmitRequest, context: Any) -> Iterator[pb.AttemptEvent]:
        claimed = request.claimed
        sub = Submission(
            task_id=request.task_id,
            patch=bytes(request.patch),
            solver=request.solver,
            model=request.model,
            agent=request.agent,
            run_id=request.run_id,
            rollout=request.rollout,
            idempotency_key=request.idempotency_key,
            claimed={
                k: getattr(claimed, k)
                for k in ("tokens_in", "tokens_out", "usd_micros", "joules_mj")
            },
        )
        yield from self._attempt(sub, context)

    def RunSolver(self, request: pb.RunSolverRequest, context: Any) -> Iterator[pb.AttemptEvent]:
        sub = Submission(
            task_id=request.task_id,
            patch=None,
            solver=request.solver,
            run_id=request.run_id,
            rollout=request.rollout,
            idempotency_key=request.idempotency_key,
        )
        yield from self._attempt(sub, context)

    def _attempt(self, sub: Submission, context: Any) -> Iterator[pb.AttemptEvent]:
        """Run the attempt in a worker; stream its progress, then the receipt."""
        events: queue.Queue[pb.AttemptEvent | BaseException | None] = queue.Queue()

        def progress(phase: str, message: str) -> None:
            events.put(pb.AttemptEvent(progress=pb.Progress(phase=phase, message=message)))

        def work() -> None:
            try:
                receipt = self.daemon.submit(sub, progress)
                events.put(pb.AttemptEvent(receipt=_receipt(receipt)))
                events.put(None)
            except BaseException as err:
                events.put(err)

        # The attempt goes on if the client disconnects: its result is still
        # signed, and a retry with the same idempotency key returns it.
        threading.Thread(target=work, name="attempt", daemon=True).start()
        while True:
            item = events.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                _abort(context, item)
                return
            yield item

    @_unary
    def Frontier(self, request: pb.FrontierRequest, context: Any) -> pb.Document:
        return _doc(self.daemon.frontier(request.suite, request.axis or "joules"))

    @_unary
    def BestOfK(self, request: pb.FrontierRequest, context: Any) -> pb.Document:
        return _doc(self.daemon.best_of_k(request.suite))

    def Export(self, request: pb.ExportRequest, context: Any) -> Iterator[pb.ExportChunk]:
        try:
            for line in self.daemon.export():
                yield pb.ExportChunk(entry=line)
            for note in self.daemon.ledger.checkpoint_history():
                yield pb.ExportChunk(checkpoint=note)
        except Exception as err:
            _abort(context, err)

    @_unary
    def Checkpoint(self, request: pb.CheckpointRequest, context: Any) -> pb.Document:
        cp = self.daemon.ledger.checkpoint()
        return _doc(
            {
                "size": cp.size,
                "root": cp.root.hex(),
                "origin": cp.origin,
                "note": self.daemon.ledger.checkpoint_note(),
            }
        )

    @_unary
    def InclusionProof(self, request: pb.InclusionProofRequest, context: Any) -> pb.Document:
        return _doc(self.daemon.ledger.inclusion_proof(request.seq, request.tree_size))

    @_unary
    def ConsistencyProof(self, request: pb.ConsistencyProofRequest, context: Any) -> pb.Document:
        return _doc(self.daemon.ledger.consistency_proof(request.old_size, request.new_size))

    @_unary
    def MeterStatus(self, request: pb.MeterStatusRequest, context: Any) -> pb.Document:
        return _doc(self.daemon.meter_status())

    @_unary
    def Calibrate(self, request: pb.CalibrateRequest, context: Any) -> pb.Document:
        cal = self.daemon.calibrate(request.seconds or 10)
        return _doc({**cal.body(), "seq": cal.seq, "time": cal.time})

    @_unary
    def RegisterSwebench(self, request: pb.RegisterSwebenchRequest, context: Any) -> pb.Document:
        try:
            records = json.loads(request.records_json)
        except ValueError as err:
            raise UsageError(f"records_json is not JSON: {err}") from err
        if not isinstance(records, list):
            raise UsageError("records_json must be a JSON array of SWE-bench records")
        return _doc(self.daemon.register_swebench(records, request.checkout_root, request.suite))


def _check_listen(config: Config) -> str:
    address = config.listen_address
    if address.startswith("unix:"):
        path = address[len("unix:") :].removeprefix("//")
        from pathlib import Path

        sock = Path(path)
        sock.parent.mkdir(parents=True, exist_ok=True)
        if sock.exists():
            sock.unlink()  # a stale socket from a daemon that did not exit cleanly
        return f"unix:{sock}"
    host = address.rsplit(":", 1)[0].strip("[]")
    loopback = host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
    if not loopback and not config.insecure:
        raise ConfigError(
            f"refusing to listen on non-loopback {address} without TLS",
            hint="listen on a Unix socket or loopback, or pass --insecure on a trusted network",
        )
    return address


class Server:
    """A running daemon: the gRPC server, its health service and graceful stop."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        config = daemon.config
        self.address = _check_listen(config)
        self.grpc = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=config.workers * 2 + 8, thread_name_prefix="rpc"
            ),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.max_send_message_length", MAX_MESSAGE),
            ],
        )
        pb_grpc.add_JouledServicer_to_server(Servicer(daemon), self.grpc)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        names = (
            pb.DESCRIPTOR.services_by_name["Jouled"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, self.grpc)
        self.port = self.grpc.add_insecure_port(self.address)
        if self.port == 0:
            raise ConfigError(
                f"cannot listen on {self.address}",
                hint="is another jouled already listening there?",
            )
        self._stopped = threading.Event()

    def start(self) -> None:
        self.grpc.start()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.health.set("jouled.v1.Jouled", health_pb2.HealthCheckResponse.SERVING)
        log.info("jouled serving on %s", self.address)

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let running attempts finish within the grace period, close."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        grace = self.daemon.config.grace_s if grace is None else grace
        log.info("stopping: waiting up to %.0f s for running attempts", grace)
        self.grpc.stop(grace).wait()
        self.daemon.close()
        log.info("stopped")

    def serve_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then stop gracefully."""
        stop = threading.Event()

        def on_signal(signum: int, frame: object) -> None:
            log.info("received %s", signal.Signals(signum).name)
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            stop.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            self.stop()
