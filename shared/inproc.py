"""The in-process transport: calls between services hosted by one process (`--target`) keep
their protobuf contracts without sockets or HTTP/2.

A service hosted here registers its servicers twice from the same `register` function: on
its grpc.aio server (the network, for other processes) and on an InProcessServer, which
collects the same method handlers (the generated `add_*Servicer_to_server` functions fill
both alike) and runs them through the same server interceptors. An InProcessChannel is what
`shared.clients.open_channel` returns for a peer hosted in this process: the generated stubs
take it like a grpc.aio.Channel (unary_unary, unary_stream, stream_unary, stream_stream).

What a call keeps, as over the network:
- messages: the request is serialized by the stub's serializer and parsed by the handler's
  deserializer, the response the other way round, so caller and callee never share an
  object; the size limit of shared.transport (MAX_MESSAGE_BYTES) is enforced on both ways
  (RESOURCE_EXHAUSTED);
- metadata (owner id, request id, trace context) as invocation metadata, and the
  handler's trailing metadata (google.rpc.Status details, x-agentmesh-version) in the
  AioRpcError or on the call;
- deadlines: the handler is cancelled when the deadline passes, the caller gets
  DEADLINE_EXCEEDED, the handler sees `time_remaining()` and `cancelled()`;
- cancellation: `call.cancel()` (or cancelling the task awaiting the call) cancels the
  handler's task, mid-stream too; a stream is flow-controlled (a bounded queue);
- the handler runs in its own task and a fresh contextvars context, as in another
  process: the caller's request id, run ids and current span do not leak into it;
- status codes: an AbortError's status, a set_code, or UNKNOWN for an exception that
  escaped the interceptors, as grpc.aio reports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import grpc

from shared import telemetry
from shared.transport import MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    # Generic only in the grpc stubs (the handlers of every method and shape are held alike).
    _Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]

# How many stream messages a handler may produce ahead of its reader (HTTP/2's flow control
# window plays this part over the network): a reader that stops, stops the handler.
STREAM_WINDOW = 8

Serializer = Callable[[Any], bytes] | None
Deserializer = Callable[[bytes], Any] | None
MetadataLike = Sequence[tuple[str, str | bytes]] | grpc.aio.Metadata | None

_CANCELLED_LOCALLY = "Locally cancelled by application!"
_DEADLINE = "Deadline Exceeded"


class _HandlerCallDetails(NamedTuple):
    method: str
    invocation_metadata: tuple[tuple[str, str | bytes], ...]


class _Status(NamedTuple):
    code: grpc.StatusCode
    details: str
    trailing: tuple[tuple[str, str | bytes], ...]


def _metadata_tuple(metadata: MetadataLike) -> tuple[tuple[str, str | bytes], ...]:
    if not metadata:
        return ()
    items = tuple((str(k), v) for k, v in metadata)
    for key, value in items:
        if key != key.lower() or not key or key.startswith(":"):
            raise ValueError(f"metadata key {key!r} is not a valid gRPC metadata key")
        if key.endswith("-bin") != isinstance(value, bytes):
            raise ValueError(f"metadata {key!r}: binary values go with -bin keys only")
    return items


class _Failed(Exception):
    """The final non-OK status of an in-process call, inside this module."""

    def __init__(self, status: _Status) -> None:
        super().__init__(status.details)
        self.status = status


def _check_size(raw: bytes, direction: str) -> None:
    if len(raw) > MAX_MESSAGE_BYTES:
        raise _Failed(
            _Status(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{direction} message larger than max ({len(raw)} vs. {MAX_MESSAGE_BYTES})",
                (),
            )
        )


def _encode(serializer: Serializer, message: Any) -> bytes:
    return message if serializer is None else serializer(message)


def _decode(deserializer: Deserializer, raw: bytes) -> Any:
    return raw if deserializer is None else deserializer(raw)


class _Context:
    """The grpc.aio.ServicerContext[Any, Any] of one in-process call (what the handlers and
    shared.interceptors use of it)."""

    def __init__(self, metadata: tuple[tuple[str, str | bytes], ...], deadline: float | None):
        self._metadata = metadata
        self._deadline = deadline
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._trailing: tuple[tuple[str, str | bytes], ...] = ()
        self._initial: tuple[tuple[str, str | bytes], ...] = ()
        self._aborted = False
        self._cancelled = False
        self._done = False
        self._callbacks: list[Callable[[Any], None]] = []
        self.on_initial: Callable[[], None] | None = None

    # -- what the handler reads
    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return self._done

    def peer(self) -> str:
        return "inproc:"

    def peer_identities(self) -> None:
        return None

    def peer_identity_key(self) -> None:
        return None

    def auth_context(self) -> dict[str, Any]:
        return {}

    # -- what the handler sets
    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: MetadataLike = ()
    ) -> None:
        if self._aborted:
            raise grpc.aio.UsageError("Abort already called!")
        self._aborted = True
        if trailing_metadata:
            self._trailing = _metadata_tuple(trailing_metadata)
        if details or not self._details:
            self._details = details
        self._code = code
        raise grpc.aio.AbortError("Locally aborted.")

    async def abort_with_status(self, status: grpc.Status) -> None:
        await self.abort(status.code, status.details, status.trailing_metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    def set_trailing_metadata(self, trailing_metadata: MetadataLike) -> None:
        self._trailing = _metadata_tuple(trailing_metadata)

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._trailing

    async def send_initial_metadata(self, initial_metadata: MetadataLike) -> None:
        self._initial = _metadata_tuple(initial_metadata)
        if self.on_initial is not None:
            self.on_initial()

    def set_compression(self, _compression: Any) -> None:
        """Nothing is compressed in process."""

    def disable_next_message_compression(self) -> None:
        """Nothing is compressed in process."""

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._callbacks.append(callback)

    def _finish(self, *, cancelled: bool = False) -> None:
        self._cancelled = self._cancelled or cancelled
        self._done = True
        for callback in self._callbacks:
            with contextlib.suppress(Exception):
                callback(self)

    def final_status(self) -> _Status:
        code = self._code if self._code is not None else grpc.StatusCode.OK
        return _Status(code, self._details, self._trailing)


class _End:
    """The end of a stream (of responses, or of a client's requests) in its queue."""


_END = _End()


def _unexpected(exc: BaseException) -> _Status:
    # What grpc.aio answers for an exception that escaped the handler.
    return _Status(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}", ())


class InProcessServer:
    """The handlers of one hosted service (and its health, reflection) behind its server
    interceptors, called by InProcessChannels."""

    def __init__(self, name: str, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()):
        self.name = name
        self._interceptors = tuple(interceptors)
        self._registered: dict[str, _Handler] = {}
        self._generic: list[grpc.GenericRpcHandler] = []
        self._open = False
        self._ready = asyncio.Event()
        self._calls: set[asyncio.Task[Any]] = set()

    # -- what the generated add_*Servicer_to_server functions call
    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, _Handler]) -> None:
        for method, handler in handlers.items():
            self._registered[f"/{service}/{method}"] = handler

    # -- lifecycle
    def start(self) -> None:
        self._open = True
        self._ready.set()

    @property
    def serving(self) -> bool:
        return self._open

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def stop(self, grace: float | None) -> None:
        """Refuse new calls (UNAVAILABLE), give the calls in flight `grace` seconds, then
        cancel what is left (as grpc.aio.Server.stop)."""
        self._open = False
        self._ready.clear()
        calls = list(self._calls)
        if calls and grace:
            await asyncio.wait(calls, timeout=grace)
        for task in calls:
            task.cancel()
        if calls:
            await asyncio.wait(calls)

    # -- dispatch
    async def _lookup(self, details: grpc.HandlerCallDetails) -> _Handler | None:
        method: str = details.method
        found = self._registered.get(method)
        if found is not None:
            return found
        for generic in self._generic:
            handler = generic.service(details)
            if handler is not None:
                return handler
        return None

    async def handler(self, method: str, metadata: tuple[tuple[str, str | bytes], ...]) -> _Handler:
        if not self._open:
            raise _Failed(
                _Status(grpc.StatusCode.UNAVAILABLE, f"{self.name} is not serving in process", ())
            )
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]]
        continuation = self._lookup
        for interceptor in reversed(self._interceptors):
            continuation = _chained(interceptor, continuation)
        # The protocol of the grpc stubs has settable members; the details are read only.
        handler = await continuation(_HandlerCallDetails(method, metadata))  # type: ignore[arg-type]
        if handler is None:
            raise _Failed(_Status(grpc.StatusCode.UNIMPLEMENTED, "Method not found!", ()))
        return handler

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """The handler's task, in a fresh context (nothing of the caller's leaks in)."""
        task = asyncio.get_running_loop().create_task(coro, context=contextvars.Context())
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        return task


def _chained(
    interceptor: grpc.aio.ServerInterceptor,
    inner: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]],
) -> Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]]:
    async def call(details: grpc.HandlerCallDetails) -> _Handler | None:
        return await interceptor.intercept_service(inner, details)

    return call


# The hosted services of this process, by service name (shared.server registers them).
_SERVERS: dict[str, InProcessServer] = {}
# The services this process hosts (set before any is built, so channels opened while
# building reach the peers started after them).
_HOSTED: set[str] = set()


def host(names: Iterable[str]) -> None:
    """Declare the services this process hosts: channels to them are in process."""
    _HOSTED.update(names)


def hosted(name: str) -> bool:
    return name in _HOSTED


def register(server: InProcessServer) -> None:
    _SERVERS[server.name] = server


def unregister(server: InProcessServer) -> None:
    if _SERVERS.get(server.name) is server:
        del _SERVERS[server.name]


def reset() -> None:
    """Forget every hosted service (tests that host several suites in one process)."""
    _SERVERS.clear()
    _HOSTED.clear()


class _Invocation:
    """One call's shared state: the target, the method, serializers, deadline."""

    def __init__(
        self,
        channel: InProcessChannel,
        method: str,
        request_serializer: Serializer,
        response_deserializer: Deserializer,
        timeout: float | None,
        metadata: MetadataLike,
    ) -> None:
        self.channel = channel
        self.method = method
        self.request_serializer = request_serializer
        self.response_deserializer = response_deserializer
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.metadata = _metadata_tuple(metadata)
        self.span = telemetry.start_client_span(method)
        if self.span is not None:
            self.metadata = (*self.metadata, *telemetry.trace_metadata(self.span))

    def end_span(self, code: grpc.StatusCode) -> None:
        if self.span is not None:
            telemetry.end_client_span(self.span, code)
            self.span = None


class _Call:
    """What grpc.aio.Call offers, for every call shape."""

    def __init__(self, invocation: _Invocation) -> None:
        self._inv = invocation
        self._status: _Status | None = None
        self._finished = asyncio.Event()
        self._initial_sent = asyncio.Event()
        self._server_task: asyncio.Task[Any] | None = None
        self._context: _Context | None = None
        self._callbacks: list[Callable[[Any], None]] = []
        self._timer: asyncio.TimerHandle | None = None
        if invocation.deadline is not None:
            delay = max(0.0, invocation.deadline - time.monotonic())
            self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    # -- state
    def _settle(self, status: _Status) -> None:
        if self._status is not None:
            return
        self._status = status
        if self._timer is not None:
            self._timer.cancel()
        self._inv.end_span(status.code)
        self._finished.set()
        self._initial_sent.set()
        self._on_settled()
        for callback in self._callbacks:
            with contextlib.suppress(Exception):
                callback(self)

    def _on_settled(self) -> None:
        """Wake whoever waits on the call's messages (the shapes override this)."""

    def _stop_server(self, *, cancelled: bool) -> None:
        if self._context is not None and cancelled:
            self._context._cancelled = True
        if self._server_task is not None and not self._server_task.done():
            self._server_task.cancel()

    def _expire(self) -> None:
        if self._status is None:
            self._stop_server(cancelled=True)
            self._settle(_Status(grpc.StatusCode.DEADLINE_EXCEEDED, _DEADLINE, ()))

    def _error(self) -> grpc.aio.AioRpcError:
        status = self._status
        assert status is not None
        return grpc.aio.AioRpcError(
            status.code,
            grpc.aio.Metadata(*(self._context._initial if self._context else ())),
            grpc.aio.Metadata(*status.trailing),
            status.details,
            f"in-process call {self._inv.method}: {status.code.name}",
        )

    def _raise_if_failed(self) -> None:
        status = self._status
        if status is None or status.code is grpc.StatusCode.OK:
            return
        if status.code is grpc.StatusCode.CANCELLED and status.details == _CANCELLED_LOCALLY:
            raise asyncio.CancelledError()
        raise self._error()

    # -- grpc.aio.Call
    def cancel(self) -> bool:
        if self._status is not None:
            return False
        self._stop_server(cancelled=True)
        self._settle(_Status(grpc.StatusCode.CANCELLED, _CANCELLED_LOCALLY, ()))
        return True

    def cancelled(self) -> bool:
        return self._status is not None and self._status.code is grpc.StatusCode.CANCELLED

    def done(self) -> bool:
        return self._status is not None

    def time_remaining(self) -> float | None:
        if self._inv.deadline is None:
            return None
        return max(0.0, self._inv.deadline - time.monotonic())

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self._status is not None:
            callback(self)
        else:
            self._callbacks.append(callback)

    def _first_message(self) -> None:
        self._initial_sent.set()

    async def initial_metadata(self) -> grpc.aio.Metadata:
        """What the handler sent with send_initial_metadata, once it sent it, its first
        message or its status."""
        await self._initial_sent.wait()
        return grpc.aio.Metadata(*(self._context._initial if self._context else ()))

    async def trailing_metadata(self) -> grpc.aio.Metadata:
        await self._finished.wait()
        assert self._status is not None
        return grpc.aio.Metadata(*self._status.trailing)

    async def code(self) -> grpc.StatusCode:
        await self._finished.wait()
        assert self._status is not None
        return self._status.code

    async def details(self) -> str:
        await self._finished.wait()
        assert self._status is not None
        return self._status.details

    async def wait_for_connection(self) -> None:
        self._raise_if_failed()

    def debug_error_string(self) -> str:
        return "" if self._status is None else f"in-process: {self._status.code.name}"

    # -- the server half
    async def _handler(self) -> _Handler:
        return await self._inv.channel.server().handler(self._inv.method, self._inv.metadata)

    def _start(self, body: Callable[[], Awaitable[None]]) -> None:
        """Run `body` (which dispatches and serves the call) as the handler's task."""
        try:
            server = self._inv.channel.server()
        except _Failed as failed:
            self._settle(failed.status)
            return
        self._context = _Context(self._inv.metadata, self._inv.deadline)
        self._context.on_initial = self._first_message
        self._server_task = server.spawn(self._serve(body))

    def _start_with(self, request: Any, serve: Callable[[bytes], Awaitable[None]]) -> None:
        """A call of one request: encoded here (a failure ends the call at once), then
        served by `serve` in the handler's task."""
        try:
            raw = _encode_request(self._inv, request)
        except _Failed as failed:
            self._settle(failed.status)
            return
        self._start(lambda: serve(raw))

    async def _serve(self, body: Callable[[], Awaitable[None]]) -> None:
        context = self._context
        assert context is not None
        try:
            await body()
        except _Failed as failed:
            self._settle(failed.status)
        except grpc.aio.AbortError:
            self._settle(context.final_status())
        except asyncio.CancelledError:
            context._finish(cancelled=True)
            self._settle(_Status(grpc.StatusCode.CANCELLED, "Cancelled by the server", ()))
            raise
        except Exception as exc:
            self._settle(_unexpected(exc))
        else:
            self._settle(context.final_status())
        finally:
            if not context.done():
                context._finish()

    def _decode_request(self, handler: _Handler, raw: bytes) -> Any:
        try:
            return _decode(handler.request_deserializer, raw)
        except Exception:
            raise _Failed(
                _Status(grpc.StatusCode.INTERNAL, "Exception deserializing request!", ())
            ) from None

    def _respond(self, handler: _Handler, response: Any) -> Any:
        """A response as the caller receives it: serialized by the handler, size-checked,
        parsed by the stub."""
        try:
            raw = _encode(handler.response_serializer, response)
        except Exception:
            raise _Failed(
                _Status(grpc.StatusCode.INTERNAL, "Failed to serialize response!", ())
            ) from None
        _check_size(raw, "Received")
        return _decode(self._inv.response_deserializer, raw)


def _behaviour(handler: _Handler, shape: str) -> Any:
    """The handler's function of the call's shape (UNIMPLEMENTED for another shape)."""
    found = getattr(handler, shape)
    if found is None:
        raise _Failed(_Status(grpc.StatusCode.UNIMPLEMENTED, "Method not found!", ()))
    return found


def _encode_request(invocation: _Invocation, request: Any) -> bytes:
    raw = _encode(invocation.request_serializer, request)
    _check_size(raw, "Sent")
    return raw


class _UnaryResponseCall(_Call):
    """A call that answers one message (unary-unary, stream-unary): awaited for it."""

    def __init__(self, invocation: _Invocation) -> None:
        super().__init__(invocation)
        self._response: Any = None

    def __await__(self) -> Any:
        return self._result().__await__()

    async def _result(self) -> Any:
        try:
            await self._finished.wait()
        except asyncio.CancelledError:
            # The task awaiting the call was cancelled: so is the call (as in grpc.aio).
            self.cancel()
            raise
        self._raise_if_failed()
        return self._response


class _OneRequest(_Call):
    """A call of one request (unary-unary, unary-stream): served by _serve_one."""

    def __init__(self, invocation: _Invocation, request: Any) -> None:
        super().__init__(invocation)
        self._start_with(request, self._serve_one)

    async def _serve_one(self, raw: bytes) -> None:
        raise NotImplementedError


class UnaryUnaryCall(_OneRequest, _UnaryResponseCall):
    async def _serve_one(self, raw: bytes) -> None:
        handler = await self._handler()
        assert self._context is not None
        response = await _behaviour(handler, "unary_unary")(
            self._decode_request(handler, raw), self._context
        )
        if self._context.code() in (None, grpc.StatusCode.OK):
            self._response = self._respond(handler, response)


class _StreamResponseCall(_Call):
    """A call that answers a stream (unary-stream, stream-stream): iterated, or read()."""

    def __init__(self, invocation: _Invocation) -> None:
        # The queue holds the window's messages and the end marker; the window's slots are
        # the semaphore (so the end always gets in, even when the reader went away).
        self._responses: asyncio.Queue[Any] = asyncio.Queue()
        self._window = asyncio.Semaphore(STREAM_WINDOW)
        super().__init__(invocation)

    def _on_settled(self) -> None:
        self._responses.put_nowait(_END)

    async def _produce(self, handler: _Handler, responses: Any) -> None:
        try:
            async for response in responses:
                message = self._respond(handler, response)
                await self._window.acquire()
                if self._status is not None:
                    return
                self._first_message()
                self._responses.put_nowait(message)
        except asyncio.CancelledError:
            # Cancelled while waiting for the window (the handler's generator is suspended
            # at a yield): the handler ends now, as cancelled, not when it is collected.
            athrow = getattr(responses, "athrow", None)
            if athrow is not None:
                with contextlib.suppress(BaseException):
                    await athrow(asyncio.CancelledError())
            raise

    async def read(self) -> Any:
        """The next response, or grpc.aio.EOF at the end of a stream that ended OK."""
        try:
            item = await self._responses.get()
        except asyncio.CancelledError:
            self.cancel()
            raise
        if item is _END:
            self._responses.put_nowait(_END)  # later reads see the end too
            self._raise_if_failed()
            return grpc.aio.EOF
        self._window.release()
        return item

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while True:
            item = await self.read()
            if item is grpc.aio.EOF:
                return
            yield item


class UnaryStreamCall(_OneRequest, _StreamResponseCall):
    async def _serve_one(self, raw: bytes) -> None:
        handler = await self._handler()
        request = self._decode_request(handler, raw)
        await self._produce(handler, _behaviour(handler, "unary_stream")(request, self._context))


class _Requests:
    """The requests of a client-streaming call: an iterator the caller passed, or what it
    writes with write() / done_writing(); the handler reads them decoded."""

    def __init__(self, call: _Call, source: Any | None) -> None:
        self._call = call
        self._queue: asyncio.Queue[bytes | _End] = asyncio.Queue(STREAM_WINDOW)
        self._feeder: asyncio.Task[None] | None = None
        self._source = source

    def start_feeding(self) -> None:
        if self._source is not None:
            self._feeder = asyncio.get_running_loop().create_task(self._feed(self._source))

    async def _feed(self, source: Any) -> None:
        if hasattr(source, "__aiter__"):
            async for request in source:
                await self.write(request)
        else:
            for request in source:
                await self.write(request)
        await self.done_writing()

    async def write(self, request: Any) -> None:
        if self._call.done():
            raise asyncio.InvalidStateError("the call has ended")
        raw = _encode_request(self._call._inv, request)
        await self._queue.put(raw)

    async def done_writing(self) -> None:
        await self._queue.put(_END)

    async def decoded(self, handler: _Handler) -> AsyncIterator[Any]:
        while True:
            raw = await self._queue.get()
            if isinstance(raw, _End):
                return
            yield self._call._decode_request(handler, raw)

    def stop(self) -> None:
        if self._feeder is not None:
            self._feeder.cancel()


class _ClientStream(_Call):
    """A call whose requests are a stream (stream-unary, stream-stream): an iterator the
    caller passed, or write() and done_writing(); served by _serve_stream."""

    def __init__(self, invocation: _Invocation, requests: Any | None) -> None:
        super().__init__(invocation)
        self._requests = _Requests(self, requests)
        self._start(self._serve_stream)
        self._requests.start_feeding()

    async def _serve_stream(self) -> None:
        raise NotImplementedError

    def _on_settled(self) -> None:
        super()._on_settled()
        self._requests.stop()

    async def write(self, request: Any) -> None:
        await self._requests.write(request)

    async def done_writing(self) -> None:
        await self._requests.done_writing()


class StreamUnaryCall(_ClientStream, _UnaryResponseCall):
    async def _serve_stream(self) -> None:
        handler = await self._handler()
        assert self._context is not None
        response = await _behaviour(handler, "stream_unary")(
            self._requests.decoded(handler), self._context
        )
        if self._context.code() in (None, grpc.StatusCode.OK):
            self._response = self._respond(handler, response)


class StreamStreamCall(_ClientStream, _StreamResponseCall):
    async def _serve_stream(self) -> None:
        handler = await self._handler()
        responses = _behaviour(handler, "stream_stream")(
            self._requests.decoded(handler), self._context
        )
        await self._produce(handler, responses)


class _MultiCallable:
    def __init__(
        self,
        channel: InProcessChannel,
        method: str,
        request_serializer: Serializer,
        response_deserializer: Deserializer,
        call_class: Callable[[_Invocation, Any], _Call],
    ) -> None:
        self._channel = channel
        self._method = method
        self._request_serializer = request_serializer
        self._response_deserializer = response_deserializer
        self._call_class = call_class

    def __call__(
        self,
        request: Any = None,
        *,
        timeout: float | None = None,
        metadata: MetadataLike = None,
        credentials: Any = None,
        wait_for_ready: bool | None = None,
        compression: Any = None,
    ) -> Any:
        invocation = _Invocation(
            self._channel,
            self._method,
            self._request_serializer,
            self._response_deserializer,
            timeout,
            metadata,
        )
        return self._call_class(invocation, request)


def _opener(call_class: Callable[[_Invocation, Any], _Call]) -> Callable[..., _MultiCallable]:
    def open_call(
        channel: InProcessChannel,
        method: str,
        request_serializer: Serializer = None,
        response_deserializer: Deserializer = None,
        _registered_method: bool | None = False,
    ) -> _MultiCallable:
        return _MultiCallable(
            channel, method, request_serializer, response_deserializer, call_class
        )

    return open_call


class InProcessChannel:
    """A grpc.aio.Channel-like channel to the service `target` hosted in this process."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._closed = False

    def server(self) -> InProcessServer:
        server = _SERVERS.get(self.target)
        if server is None or not server.serving or self._closed:
            raise _Failed(
                _Status(grpc.StatusCode.UNAVAILABLE, f"{self.target} is not serving in process", ())
            )
        return server

    # The four call shapes the generated stubs open (grpc.aio.Channel's signatures).
    unary_unary = _opener(UnaryUnaryCall)
    unary_stream = _opener(UnaryStreamCall)
    stream_unary = _opener(StreamUnaryCall)
    stream_stream = _opener(StreamStreamCall)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        server = _SERVERS.get(self.target)
        if self._closed:
            return grpc.ChannelConnectivity.SHUTDOWN
        if server is not None and server.serving:
            return grpc.ChannelConnectivity.READY
        return grpc.ChannelConnectivity.TRANSIENT_FAILURE

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        while self.get_state() is last_observed_state:
            await asyncio.sleep(0.05)

    async def channel_ready(self) -> None:
        """Wait until the target serves (it may start after this channel was opened)."""
        while True:
            server = _SERVERS.get(self.target)
            if server is not None:
                await server.wait_ready()
                if server.serving:
                    return
            else:
                await asyncio.sleep(0.05)

    async def close(self, grace: float | None = None) -> None:
        self._closed = True

    async def __aenter__(self) -> InProcessChannel:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()
