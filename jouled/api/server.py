"""The gRPC servicer: translate the request, call the library, translate the answer.

Library errors become status codes with the library's own message and hint,
so a caller learns what was wrong and what to do; an unexpected exception is
logged and answered INTERNAL while the daemon keeps serving.
"""

from __future__ import annotations

import grp
import json
import logging
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from jouled import limits, visibility
from jouled.api.auth import (
    Authenticator,
    RoleInterceptor,
    current_identity,
    server_credentials,
)
from jouled.api.metrics import MetricsServer
from jouled.api.peercred import PeerCred, PeerRelay
from jouled.attempt_queue import Ticket
from jouled.auth import OPERATOR, Identity
from jouled.config import Config
from jouled.contracts import Contract
from jouled.daemon import Daemon
from jouled.documents.answers import Checkpoint
from jouled.documents.sent import OpReceipt, Receipt
from jouled.errors import ConfigError, JouledError, Kind, UsageError
from jouled.opwindows import DISCONNECT
from jouled.quotas import Places
from jouled.submission import Submission
from jouled.v1 import jouled_pb2 as pb
from jouled.v1 import jouled_pb2_grpc as pb_grpc

log = logging.getLogger("jouled")

STATUS = {
    Kind.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Kind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Kind.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    Kind.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Kind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Kind.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    Kind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Kind.INTERNAL: grpc.StatusCode.INTERNAL,
}
CODE_METADATA = "jouled-code"  # trailing metadata: JouledError.code, where it has one
MAX_MESSAGE = 16 << 20  # above the patch bound, so an oversized patch meets our own error
READ_THREADS = 16  # RPC threads no attempt can hold: health and reads always find one
# Of those, reads (every jouled.v1 call but Submit, RunSolver and OpenWindow, whose
# threads are counted apart) may hold this many at once, and one credential this many:
# health, reflection and refusals always find a thread.
READS_MAX = 12
READS_PER_CREDENTIAL = 4
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"

T = TypeVar("T")


# Trailing metadata on every refusal the daemon makes: its error kind. A client tells
# the daemon's own UNAVAILABLE ("stopping") from a daemon it cannot reach by it.
ERROR_KEY = "jouled-error"


def _abort(context: grpc.ServicerContext, err: BaseException) -> None:
    if isinstance(err, JouledError):
        metadata = [(ERROR_KEY, err.kind.value)]
        if err.code:  # a reason callers sort by, beside the message they read
            metadata.append((CODE_METADATA, err.code))
        context.set_trailing_metadata(tuple(metadata))
        context.abort(STATUS[err.kind], err.diagnostics())
    context.set_trailing_metadata(((ERROR_KEY, "internal"),))
    log.error("unexpected error serving a request", exc_info=err)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error: {err}; see the daemon's log")


def _unary(fn: Callable[..., T]) -> Callable[..., T]:
    def wrapper(self: Servicer, request: Any, context: grpc.ServicerContext) -> T:
        try:
            give_back = self.read_place()
            try:
                return fn(self, request, context)
            finally:
                give_back()
        except Exception as err:
            _abort(context, err)
            raise  # unreachable: abort raises

    return wrapper


def _doc(value: Any) -> pb.Document:
    # Documents are reports (floats allowed); only signed payloads are canonical.
    return pb.Document(json=json.dumps(value, sort_keys=True, allow_nan=False))


def _task(c: Contract, caller: Identity) -> pb.Task:
    return pb.Task(
        task_id=c.task_id,
        suite=c.suite,
        name=c.name,
        prompt=c.prompt,
        digest=c.digest,
        test_cmd=list(c.test_cmd),
        test_files=list(c.test_files),
        timeout_s=c.timeout_s,
        fail_to_pass=visibility.expected_ids(c, c.fail_to_pass or (), caller),
        pass_to_pass=visibility.expected_ids(c, c.pass_to_pass or (), caller),
        source=c.source,
        license=c.license,
        kind=c.kind,
        hidden_files=c.hidden_count,
    )


def _receipt(r: Receipt) -> pb.Receipt:
    return pb.Receipt(
        seq=r.seq,
        task_id=r.task_id,
        patch_sha256=r.patch_sha256,
        status=r.status.value,
        resolved=r.resolved,
        leaf_hash=r.leaf_hash,
        json=json.dumps(r.to_dict(), sort_keys=True),
    )


def _op_receipt(r: OpReceipt) -> pb.OpReceipt:
    return pb.OpReceipt(
        seq=r.seq,
        window_id=r.window_id,
        label=r.label,
        attribution=r.energy.get("attribution", ""),
        abandoned=r.abandoned,
        leaf_hash=r.leaf_hash,
        json=json.dumps(r.to_dict(), sort_keys=True),
    )


class Servicer(pb_grpc.JouledServicer):
    def __init__(
        self, daemon: Daemon, peer: Callable[[grpc.ServicerContext], PeerCred | None] | None = None
    ) -> None:
        self.daemon = daemon
        self._peer = peer or (lambda context: None)
        self.reads = Places(
            "reads in progress",
            total=READS_MAX,
            per_holder=READS_PER_CREDENTIAL,
            hint="retry once a call in progress has ended (read each stream you open to its "
            "end, or cancel it)",
        )

    def read_place(self) -> Callable[[], None]:
        """A place for one read; operators count towards the total only."""
        who = current_identity()
        return self.reads.take(None if who is None or OPERATOR in who.roles else who.name)

    @_unary
    def ListTasks(self, request: pb.ListTasksRequest, context: Any) -> pb.ListTasksResponse:
        caller = current_identity()
        return pb.ListTasksResponse(
            tasks=[_task(c, caller) for c in self.daemon.tasks(request.suite)],
            solvers=self.daemon.solvers.names,
        )

    @_unary
    def GetTask(self, request: pb.GetTaskRequest, context: Any) -> pb.Task:
        return _task(self.daemon.task(request.task_id), current_identity())

    def FetchTask(self, request: pb.FetchTaskRequest, context: Any) -> Iterator[pb.TaskFile]:
        try:
            give_back = self.read_place()
            try:
                for path, content, mode in self.daemon.task_files(request.task_id):
                    yield pb.TaskFile(path=path, content=content, mode=mode)
            finally:
                give_back()
        except Exception as err:
            _abort(context, err)

    def Submit(self, request: pb.SubmitRequest, context: Any) -> Iterator[pb.AttemptEvent]:
        claimed = request.claimed
        if request.next_rollout and request.rollout:
            _abort(
                context,
                UsageError(
                    f"rollout {request.rollout} and next_rollout both set",
                    hint="name the rollout, or set next_rollout and let the daemon number it",
                ),
            )
        sub = Submission(
            task_id=request.task_id,
            patch=bytes(request.patch),
            solver=request.solver,
            model=request.model,
            agent=request.agent,
            run_id=request.run_id,
            rollout=None if request.next_rollout else request.rollout,
            idempotency_key=request.idempotency_key,
            claimed={
                k: getattr(claimed, k)
                for k in ("tokens_in", "tokens_out", "usd_micros", "joules_mj")
            },
            caller=current_identity(),
        )
        yield from self._attempt(sub, context)

    def RunSolver(self, request: pb.RunSolverRequest, context: Any) -> Iterator[pb.AttemptEvent]:
        sub = Submission(
            task_id=request.task_id,
            patch=None,
            solver=request.solver,
            model=request.model,
            run_id=request.run_id,
            rollout=request.rollout,
            idempotency_key=request.idempotency_key,
            caller=current_identity(),
        )
        yield from self._attempt(sub, context)

    def _attempt(self, sub: Submission, context: Any) -> Iterator[pb.AttemptEvent]:
        """Queue the attempt; stream its queue position, heartbeats and progress, then the receipt.

        The attempt runs on one of the daemon's workers, never on this RPC thread;
        a full queue is refused at once. When the call ends early (cancelled, or
        past its deadline) the daemon drops the attempt if it has not started and
        records it as an abort if it has.
        """
        daemon = self.daemon
        if not daemon.callers.acquire(blocking=False):
            # Every slot is held by a call that waits on a queued or running attempt.
            _abort(context, daemon.busy())
        try:
            events: queue.Queue[pb.AttemptEvent | None] = queue.Queue()

            def progress(phase: str, message: str) -> None:
                events.put(pb.AttemptEvent(progress=pb.Progress(phase=phase, message=message)))

            try:
                ticket = daemon.start(sub, progress)
            except Exception as err:
                _abort(context, err)
                return
            context.add_callback(ticket.cancel)
            ticket.future.add_done_callback(lambda f: events.put(None))
            yield from self._follow(ticket, events, daemon.config.heartbeat_s)
            try:
                receipt = ticket.future.result()
            except Exception as err:
                _abort(context, err)
                return
            yield pb.AttemptEvent(receipt=_receipt(receipt))
        finally:
            daemon.callers.release()

    @staticmethod
    def _follow(
        ticket: Ticket, events: queue.Queue[pb.AttemptEvent | None], every_s: float
    ) -> Iterator[pb.AttemptEvent]:
        shown: int | None = -1
        while True:
            position = ticket.position()
            if position != shown and position is not None:
                shown = position
                yield pb.AttemptEvent(
                    progress=pb.Progress(
                        phase="queued",
                        message=f"position {position} in the attempt queue",
                        queue_position=position,
                    )
                )
            try:
                item = events.get(timeout=every_s)
            except queue.Empty:
                yield pb.AttemptEvent(
                    progress=pb.Progress(
                        phase="heartbeat",
                        message="waiting for a worker" if position else "running",
                        queue_position=position or 0,
                    )
                )
                continue
            if item is None:
                return
            yield item

    @_unary
    def Frontier(self, request: pb.FrontierRequest, context: Any) -> pb.Document:
        return _doc(
            self.daemon.frontier(
                request.suite,
                request.axis or "joules",
                merge_digests=request.merge_digests,
                page_size=request.page_size,
                page_token=request.page_token,
            )
        )

    @_unary
    def BestOfK(self, request: pb.FrontierRequest, context: Any) -> pb.Document:
        return _doc(
            self.daemon.best_of_k(
                request.suite, page_size=request.page_size, page_token=request.page_token
            )
        )

    def Export(self, request: pb.ExportRequest, context: Any) -> Iterator[pb.ExportChunk]:
        try:
            give_back = self.read_place()
            try:
                lines, history = self.daemon.export()
                for line in lines:
                    yield pb.ExportChunk(entry=line)
                for note in history():
                    yield pb.ExportChunk(checkpoint=note)
            finally:
                give_back()
        except Exception as err:
            _abort(context, err)

    @_unary
    def Checkpoint(self, request: pb.CheckpointRequest, context: Any) -> pb.Document:
        cp = self.daemon.ledger.checkpoint()
        return _doc(
            Checkpoint(
                size=cp.size,
                root=cp.root.hex(),
                origin=cp.origin,
                note=self.daemon.ledger.checkpoint_note(),
            ).to_dict()
        )

    @_unary
    def InclusionProof(self, request: pb.InclusionProofRequest, context: Any) -> pb.Document:
        seq, size = (
            limits.integer("seq", request.seq),
            limits.integer("tree_size", request.tree_size),
        )
        return _doc(self.daemon.ledger.inclusion_proof(seq, size))

    @_unary
    def ConsistencyProof(self, request: pb.ConsistencyProofRequest, context: Any) -> pb.Document:
        old = limits.integer("old_size", request.old_size)
        new = limits.integer("new_size", request.new_size)
        return _doc(self.daemon.ledger.consistency_proof(old, new))

    @_unary
    def MeterStatus(self, request: pb.MeterStatusRequest, context: Any) -> pb.Document:
        return _doc(self.daemon.meter_status().to_dict())

    @_unary
    def Calibrate(self, request: pb.CalibrateRequest, context: Any) -> pb.Document:
        seconds = limits.integer(
            "calibration seconds", request.seconds or 10, low=1, high=limits.CALIBRATE_MAX_S
        )
        cal = self.daemon.calibrate(seconds)
        return _doc({**cal.body(), "seq": cal.seq, "time": cal.time})

    @_unary
    def RegisterSwebench(self, request: pb.RegisterSwebenchRequest, context: Any) -> pb.Document:
        try:
            records = json.loads(request.records_json)
        except ValueError as err:
            raise UsageError(f"records_json is not JSON: {err}") from err
        if not isinstance(records, list):
            raise UsageError("records_json must be a JSON array of SWE-bench records")
        return _doc(self.daemon.register_swebench(records, request.suite))

    @_unary
    def GetReceipt(self, request: pb.GetReceiptRequest, context: Any) -> pb.Receipt:
        which, caller = request.WhichOneof("key"), current_identity()
        if which == "idempotency_key":
            return _receipt(
                self.daemon.get_receipt(idempotency_key=request.idempotency_key, caller=caller)
            )
        if which == "seq":
            return _receipt(self.daemon.get_receipt(seq=request.seq, caller=caller))
        raise UsageError("GetReceipt needs an idempotency_key or a seq")

    @_unary
    def GetLogs(self, request: pb.GetLogsRequest, context: Any) -> pb.Document:
        return _doc(self.daemon.get_logs(request.seq, caller=current_identity()))

    @_unary
    def PublicKeys(self, request: pb.PublicKeysRequest, context: Any) -> pb.Document:
        return _doc(self.daemon.public_keys().to_dict())

    def OpenWindow(self, request: pb.OpenWindowRequest, context: Any) -> Iterator[pb.WindowEvent]:
        """Open the window, name it, hold the call while it is open, then send its receipt.

        The call is the window's lease: when it ends first (the caller exited or
        cancelled), the window is signed as abandoned.
        """
        peer = self._peer(context)
        try:
            window = self.daemon.open_window(
                request.label,
                caller=current_identity(),
                task_id=request.task_id,
                run_id=request.run_id,
                rollout=request.rollout,
                pid=request.pid,
                peer_pid=None if peer is None else peer.pid,
                peer_uid=None if peer is None else peer.uid,
            )
        except Exception as err:
            _abort(context, err)
            return
        context.add_callback(lambda: self.daemon.ops.abandon(window, DISCONNECT))
        yield pb.WindowEvent(
            opened=pb.WindowOpened(
                window_id=window.id,
                attribution=window.attribution,
                max_s=self.daemon.ops.max_s,
            )
        )
        window.closed.wait()
        if window.receipt is not None:
            yield pb.WindowEvent(closed=_op_receipt(window.receipt))

    @_unary
    def CloseWindow(self, request: pb.CloseWindowRequest, context: Any) -> pb.OpReceipt:
        return _op_receipt(self.daemon.close_window(request.window_id, caller=current_identity()))


def _unix_path(address: str) -> Path:
    return Path(address[len("unix:") :].removeprefix("//"))


def _group_id(name: str) -> int | None:
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid if not name.isdigit() else int(name)
    except KeyError:
        raise ConfigError(
            f"--socket-group {name!r} is not a group on this host",
            hint="create it (groupadd --system jouled-agents) or name another",
        ) from None


def _reflection_v1(servicer: Any) -> grpc.GenericRpcHandler:
    """grpc.reflection.v1 beside v1alpha: the same messages under the newer service name."""
    return grpc.method_handlers_generic_handler(
        REFLECTION_V1,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )


class Server:
    """A running daemon: the gRPC server, its listeners, health service and graceful stop."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        config = daemon.config
        self.auth = Authenticator.from_config(config)
        # Each open op window holds its OpenWindow call (and a thread) while it is open.
        threads = daemon.max_callers + READ_THREADS + config.op_windows_max
        self.grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rpc"),
            interceptors=[RoleInterceptor(self.auth)],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.max_send_message_length", MAX_MESSAGE),
            ],
        )
        pb_grpc.add_JouledServicer_to_server(Servicer(daemon, self.auth.peer), self.grpc)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        names = (
            pb.DESCRIPTOR.services_by_name["Jouled"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
            REFLECTION_V1,
        )
        reflection_servicer = reflection.ReflectionServicer(names)
        reflection.enable_server_reflection(names, self.grpc)
        self.grpc.add_generic_rpc_handlers((_reflection_v1(reflection_servicer),))
        self.addresses = config.listen_addresses
        self.address = self.addresses[0]
        self.relays: list[PeerRelay] = []
        self.port = 0
        for address in self.addresses:
            self._listen(config, address)
        self._stopped = threading.Event()
        # Last: it serves as soon as it binds, so nothing after it may fail.
        self.metrics: MetricsServer | None = None
        if config.metrics_address is not None:
            self.metrics = MetricsServer(daemon, *config.metrics_address, self.auth.tokens)

    def _listen(self, config: Config, address: str) -> None:
        if address.startswith("unix:"):
            if self.relays:
                raise ConfigError("one Unix socket per daemon", hint="give one unix: --listen")
            # gRPC listens privately; the relay accepts on the public path and knows the peer.
            private = config.private_socket_path
            if private.exists():
                private.unlink()
            if self.grpc.add_insecure_port(f"unix:{private}") == 0:
                raise ConfigError(f"cannot listen on {private}")
            try:
                relay = PeerRelay(
                    _unix_path(address), private, group=_group_id(config.socket_group)
                )
            except OSError as err:
                raise ConfigError(f"cannot listen on {address}: {err.strerror}") from err
            self.auth.relay = relay
            self.relays.append(relay)
            return
        port = self.grpc.add_secure_port(address, server_credentials(config, address))
        if port == 0:
            raise ConfigError(
                f"cannot listen on {address}",
                hint="is another jouled already listening there?",
            )
        self.port = self.port or port

    def start(self) -> None:
        self.grpc.start()
        for relay in self.relays:
            relay.start()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.health.set("jouled.v1.Jouled", health_pb2.HealthCheckResponse.SERVING)
        log.info("jouled serving on %s", ", ".join(self.addresses))

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let running attempts finish within the grace period, close."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        # Open op windows end now, signed as abandoned, so their calls do not wait out the grace.
        self.daemon.close_windows()
        for relay in self.relays:
            relay.close()
        grace = self.daemon.config.grace_s if grace is None else grace
        log.info("stopping: waiting up to %.0f s for running attempts", grace)
        self.grpc.stop(grace).wait()
        if self.metrics is not None:  # served through the grace period, so a drain shows
            self.metrics.close()
        self.daemon.close()
        log.info("stopped")

    def serve_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then stop gracefully.

        The kernel hands a process's signal to any one of its threads, gRPC's
        included, while Python runs handlers in the main thread alone: a main
        thread asleep on a lock would never run them. It sleeps reading a pipe
        instead, which the interpreter writes a byte to (`signal.set_wakeup_fd`)
        whichever thread the signal reached.
        """
        stop = threading.Event()

        def on_signal(signum: int, frame: object) -> None:
            log.info("received %s", signal.Signals(signum).name)
            stop.set()

        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        previous_fd = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            while not stop.is_set():
                os.read(wake_r, 64)  # the handler has run once this returns to Python
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            signal.set_wakeup_fd(previous_fd)
            os.close(wake_r)
            os.close(wake_w)
            self.stop()
