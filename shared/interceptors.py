"""Server interceptor of every service: request id, run/thread ids for the logs, version
metadata, access log, RPC metrics, the server span, DomainError -> status.

One place turns exceptions into gRPC statuses: a DomainError becomes its status with
google.rpc details; a store that cannot be reached (shared.errors.as_domain_error) becomes
UNAVAILABLE; anything else becomes INTERNAL with a generic message (the trace is logged,
never sent).

Every response ends with the trailing metadata `x-agentmesh-version: <version>` (errors
too), so a client (or an operator with grpcurl -v) sees which version answered. Trailing,
not initial: setting it costs nothing, while sending initial metadata early is one more
network operation per call (~10% of a small unary call here).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import grpc
from google.protobuf.message import DecodeError

from shared import compat, identity, logs, metrics, telemetry
from shared.errors import Internal, InvalidArgument, as_domain_error
from shared.logs import request_id_var, run_id_var, thread_id_var

log = logging.getLogger("agentmesh.rpc")

VERSION_KEY = "x-agentmesh-version"

_QUIET_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")

# A grpc.aio server takes the same RpcMethodHandler as a sync one, with coroutine functions
# and async generators as its behaviours; the grpc stubs type the behaviours of the sync
# server only, so the wrappers read them as what an aio server holds. (Only the stubs make
# these classes generic: the aliases exist for the type checker.)
if TYPE_CHECKING:
    _Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
    _Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
    _AsyncUnary: TypeAlias = Callable[[Any, _Context], Awaitable[Any]]
    _AsyncStream: TypeAlias = Callable[[Any, _Context], AsyncIterator[Any]]
# Longest request text in a contents-enabled debug access line.
_MAX_LOGGED_REQUEST_CHARS = 4000


async def _fail(
    context: _Context,
    exc: BaseException,
    method: str,
    metadata: tuple[tuple[str, str], ...],
) -> None:
    """Abort with the status of `exc`; `metadata` joins the status details in the trailers
    (an abort replaces the trailing metadata set before)."""
    error = as_domain_error(exc, f"internal error (request id {request_id_var.get()})")
    if error is not exc:
        if isinstance(error, Internal):
            log.exception("unhandled error in %s", method)
        else:
            # An outage of a store, not a bug: one line, no trace per failed call.
            fields = {**error.metadata, "method": method, "error": type(exc).__name__}
            log.warning(error.message, extra={"fields": fields})
    status = error.to_grpc_status()
    await context.abort(status.code, status.details, (*status.trailing_metadata, *metadata))


def _aborted_code(context: _Context) -> grpc.StatusCode:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    return grpc.StatusCode.UNKNOWN


class _Call:
    """The per-call bookkeeping shared by every handler shape."""

    __slots__ = ("active", "code", "rid_token", "run_token", "start", "thread_token")

    def __init__(
        self, owner: ServerInterceptor, method: str, request: Any, context: _Context
    ) -> None:
        self.start = time.perf_counter()
        self.code = grpc.StatusCode.OK
        metadata = context.invocation_metadata()
        self.rid_token = request_id_var.set(identity.request_id(context))
        ids = telemetry.request_ids(request) if request is not None else {}
        run_id = ids.get(telemetry.RUN_ID)
        thread_id = ids.get(telemetry.THREAD_ID)
        self.run_token: Token[str] | None = run_id_var.set(run_id) if run_id else None
        self.thread_token: Token[str] | None = thread_id_var.set(thread_id) if thread_id else None
        self.active = (
            None
            if owner.quiet(method)
            else telemetry.start_server_span(owner.service, method, request, metadata, ids)
        )

    def failed(self, exc: BaseException, context: _Context) -> None:
        if isinstance(exc, asyncio.CancelledError):
            self.code = grpc.StatusCode.CANCELLED
        elif isinstance(exc, grpc.aio.AbortError):
            self.code = _aborted_code(context)
        else:
            self.code = as_domain_error(exc).code

    def end(
        self, rpc_service: str, rpc_method: str, method: str, quiet: bool, request: Any
    ) -> None:
        seconds = time.perf_counter() - self.start
        metrics.rpc_handled(rpc_service, rpc_method, self.code.name, seconds)
        if not quiet:
            _access(method, self.code.name, seconds, request)
        if self.active is not None:
            telemetry.finish(self.active, self.code)
        if self.thread_token is not None:
            _reset(thread_id_var, self.thread_token)
        if self.run_token is not None:
            _reset(run_id_var, self.run_token)
        _reset(request_id_var, self.rid_token)


def _reset(var: ContextVar[str], token: Token[str]) -> None:
    # A stream whose client went away is finalised in another context, where the token
    # cannot be used; that context's value is then simply cleared.
    try:
        var.reset(token)
    except ValueError:
        var.set("")


class _Undecodable:
    """What a method receives for request bytes that do not parse as its request message.

    gRPC answers UNKNOWN when a deserializer raises; handing the handler this marker instead
    lets `_admit` answer INVALID_ARGUMENT like any other bad request."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error

    def __str__(self) -> str:
        return f"<undecodable request: {self.error}>"


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except DecodeError as exc:
            return _Undecodable(str(exc)[:200])

    return deserialize


def _admit(request: Any, method: str) -> None:
    """Refuse what the servicer cannot be handed: undecodable bytes, and enum values this
    build does not know outside stored data (shared/compat.py; those inside are reset)."""
    if isinstance(request, _Undecodable):
        raise InvalidArgument(
            "request", f"is not an encoding of this method's request ({request.error})"
        )
    if request is None or not hasattr(request, "DESCRIPTOR"):
        return
    found = compat.check_enums(request)
    if found.refused:
        name, number = found.refused[0]
        raise InvalidArgument(name, f"{number} is not a value this server knows")
    if found.reset:
        log.warning(
            "unknown enum values read as UNSPECIFIED",
            extra={"fields": {"method": method, "enum_fields": found.reset}},
        )


def _decoded(request: Any) -> Any:
    """The request as the call's bookkeeping may read it (None when it did not decode)."""
    return None if isinstance(request, _Undecodable) else request


class ServerInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, service: str = "", version: str = "") -> None:
        # `service` names the instrumentation scope of the server spans (the process's
        # service when empty); `version` goes out as x-agentmesh-version (none when empty).
        self.service = service
        self.version_metadata: tuple[tuple[str, str], ...] = (
            ((VERSION_KEY, version),) if version else ()
        )
        self._wrapped: dict[str, _Handler] = {}

    @staticmethod
    def quiet(method: str) -> bool:
        return method.startswith(_QUIET_PREFIXES)

    def _mark_version(self, context: _Context) -> None:
        if self.version_metadata:
            context.set_trailing_metadata(self.version_metadata)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> _Handler | None:
        method = handler_call_details.method
        # Handlers are fixed per method: wrap each once, not on every call.
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = await continuation(handler_call_details)
            if handler is None:
                return handler
            wrapped = self._wrapped[method] = self._wrap(method, handler)
        return wrapped

    def _wrap(self, method: str, handler: _Handler) -> _Handler:
        quiet = self.quiet(method)
        rpc_service, rpc_method = metrics.split_method(method)

        if handler.unary_unary is not None:
            inner_uu = cast("_AsyncUnary", handler.unary_unary)

            async def unary_unary(request: Any, context: _Context) -> Any:
                call = _Call(self, method, _decoded(request), context)
                try:
                    self._mark_version(context)
                    _admit(request, method)
                    return await inner_uu(request, context)
                except (asyncio.CancelledError, grpc.aio.AbortError) as exc:
                    call.failed(exc, context)
                    raise
                except Exception as exc:
                    call.failed(exc, context)
                    await _fail(context, exc, method, self.version_metadata)
                finally:
                    call.end(rpc_service, rpc_method, method, quiet, request)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary,
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )

        if handler.unary_stream is not None:
            inner_us = cast("_AsyncStream", handler.unary_stream)

            async def unary_stream(request: Any, context: _Context) -> AsyncIterator[Any]:
                call = _Call(self, method, _decoded(request), context)
                try:
                    self._mark_version(context)
                    _admit(request, method)
                    async for item in inner_us(request, context):
                        yield item
                except (asyncio.CancelledError, grpc.aio.AbortError) as exc:
                    call.failed(exc, context)
                    raise
                except Exception as exc:
                    call.failed(exc, context)
                    await _fail(context, exc, method, self.version_metadata)
                finally:
                    call.end(rpc_service, rpc_method, method, quiet, request)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )

        if handler.stream_stream is not None:
            # Reflection (quiet: no span) is the only RPC streaming both ways here.
            inner_ss = cast("_AsyncStream", handler.stream_stream)

            async def stream_stream(requests: Any, context: _Context) -> AsyncIterator[Any]:
                call = _Call(self, method, None, context)
                try:
                    self._mark_version(context)
                    async for item in inner_ss(requests, context):
                        yield item
                except (asyncio.CancelledError, grpc.aio.AbortError) as exc:
                    call.failed(exc, context)
                    raise
                except Exception as exc:
                    call.failed(exc, context)
                    await _fail(context, exc, method, self.version_metadata)
                finally:
                    call.end(rpc_service, rpc_method, method, quiet, None)

            return grpc.stream_stream_rpc_method_handler(
                stream_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


def _access(method: str, code: str, seconds: float, request: Any) -> None:
    if log.isEnabledFor(logging.DEBUG) or code != "OK":
        fields: dict[str, object] = {"method": method, "code": code, "ms": round(seconds * 1000, 2)}
        if logs.contents_enabled() and request is not None:
            fields["request"] = str(request)[:_MAX_LOGGED_REQUEST_CHARS]
        level = logging.ERROR if code == "INTERNAL" else logging.INFO
        log.log(level, "rpc", extra={"fields": fields})
