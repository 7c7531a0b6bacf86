"""Tracing across the services (OpenTelemetry): W3C trace context in gRPC metadata, a server
span per RPC (shared/interceptors.py), a client span per outgoing call (channels from
shared.clients.open_channel), a span per HTTP request at the gateway (HttpMiddleware).

Off unless AGENTMESH_OTLP_ENDPOINT is set (or a test installs an exporter with `configure`):
then there is no provider, channels get no client interceptor, and the server interceptor's
whole cost is one `is None` check.

Spans carry ids, never contents: rpc.*, agentmesh.run_id, agentmesh.thread_id,
agentmesh.profile and agentmesh.owner_hash (a sha256 prefix; the owner id itself is never
recorded).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from shared import metrics
from shared.version import VERSION

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from shared.settings import Settings

RUN_ID = "agentmesh.run_id"
THREAD_ID = "agentmesh.thread_id"
OWNER_HASH = "agentmesh.owner_hash"
PROFILE = "agentmesh.profile"

# Must match shared.identity.OWNER_KEY (not imported: identity -> errors stays light).
_OWNER_KEY = "x-agentmesh-owner"
# Server-side statuses that mean the service failed (OpenTelemetry gRPC conventions);
# the others are the caller's problem and leave the span's status unset.
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)

_propagator = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None
_tracers: dict[str, Tracer] = {}
_process_service = ""
# The service whose code is running (several share a process in tests): names the
# instrumentation scope of client spans.
_service_var: contextvars.ContextVar[str] = contextvars.ContextVar("agentmesh_service", default="")
# Client spans of streaming calls end from a task; hold them until they finish.
_pending: set[asyncio.Task[None]] = set()


def configure(service: str, settings: Settings, *, exporter: SpanExporter | None = None) -> bool:
    """Turn tracing on for this process when settings.otlp_endpoint is set (OTLP over gRPC,
    batched) or `exporter` is given (exported synchronously: tests). Otherwise leave it as
    it is (off, unless already on). True when tracing is on."""
    if exporter is None and not settings.otlp_endpoint:
        return _provider is not None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": service, "service.namespace": "agentmesh", "service.version": VERSION}
        )
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint))
        )
    shutdown()
    _install(provider, service)
    return True


def _install(provider: TracerProvider | None, service: str) -> None:
    global _provider, _process_service
    _provider = provider
    _process_service = service
    _tracers.clear()


def shutdown() -> None:
    """Flush the spans not yet exported and turn tracing off."""
    provider = _provider
    _install(None, "")
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    return _provider is not None


def _tracer(service: str) -> Tracer | None:
    provider = _provider
    if provider is None:
        return None
    name = service or _process_service
    found = _tracers.get(name)
    if found is None:
        found = _tracers.setdefault(name, provider.get_tracer(f"agentmesh.{name}", VERSION))
    return found


def owner_hash(owner: str) -> str:
    """A stable, non-reversible label of an owner id (16 hex digits of its sha256)."""
    return hashlib.sha256(owner.encode()).hexdigest()[:16]


def annotate(
    *,
    run_id: str | None = None,
    thread_id: str | None = None,
    owner: str | None = None,
    profile: str | None = None,
) -> None:
    """Add run attributes to the current span (a no-op when tracing is off)."""
    if _provider is None:
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    for key, value in ((RUN_ID, run_id), (THREAD_ID, thread_id), (PROFILE, profile)):
        if value:
            span.set_attribute(key, value)
    if owner:
        span.set_attribute(OWNER_HASH, owner_hash(owner))


# Request fields that name the run, per request type: (attribute, field, subfield).
_ID_FIELDS: dict[str, tuple[tuple[str, str, str], ...]] = {}
_CANDIDATES = (
    (RUN_ID, "run_id", ""),
    (THREAD_ID, "thread_id", ""),
    (PROFILE, "profile_name", ""),
    (PROFILE, "execution_profile_name", ""),
    (PROFILE, "profile", "name"),
)


def request_ids(request: Any) -> dict[str, str]:
    """The run id, thread id and profile name a request carries (attribute -> value)."""
    descriptor = getattr(request, "DESCRIPTOR", None)
    if descriptor is None:
        return {}
    fields = _ID_FIELDS.get(descriptor.full_name)
    if fields is None:
        by_name = descriptor.fields_by_name
        found = []
        for attribute, name, sub in _CANDIDATES:
            field = by_name.get(name)
            if field is None:
                continue
            if sub:
                if field.message_type is None or sub not in field.message_type.fields_by_name:
                    continue
            elif field.type != field.TYPE_STRING or field.is_repeated:
                continue
            found.append((attribute, name, sub))
        fields = _ID_FIELDS.setdefault(descriptor.full_name, tuple(found))
    out: dict[str, str] = {}
    for attribute, name, sub in fields:
        value = getattr(request, name)
        if sub:
            value = getattr(value, sub)
        if value and attribute not in out:
            out[attribute] = value
    return out


def _metadata_dict(metadata: Iterable[tuple[str, str | bytes]] | None) -> dict[str, str]:
    return {k: v for k, v in (metadata or ()) if isinstance(v, str)}


class Active:
    """A span made current for the duration of a call (see start_server_span / finish)."""

    __slots__ = ("service_token", "span", "token")

    def __init__(self, span: Span, service: str) -> None:
        self.span = span
        self.token = otel_context.attach(trace.set_span_in_context(span))
        self.service_token = _service_var.set(service)


def start_server_span(
    service: str,
    method: str,
    request: Any,
    metadata: Iterable[tuple[str, str | bytes]] | None,
    ids: Mapping[str, str],
) -> Active | None:
    """The server span of one RPC, child of the caller's span (traceparent in `metadata`),
    made current; None when tracing is off."""
    tracer = _tracer(service)
    if tracer is None:
        return None
    md = _metadata_dict(metadata)
    rpc_service, rpc_method = metrics.split_method(method)
    span = tracer.start_span(
        method.lstrip("/"),
        context=_propagator.extract(md),
        kind=SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.service": rpc_service, "rpc.method": rpc_method},
    )
    for key, value in ids.items():
        span.set_attribute(key, value)
    owner = md.get(_OWNER_KEY)
    if owner:
        span.set_attribute(OWNER_HASH, owner_hash(owner))
    return Active(span, service)


def finish(active: Active, code: grpc.StatusCode, *, server: bool = True) -> None:
    span = active.span
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    failed = code in _SERVER_ERRORS if server else code is not grpc.StatusCode.OK
    if failed:
        span.set_status(Status(StatusCode.ERROR, code.name))
    span.end()
    _service_var.reset(active.service_token)
    otel_context.detach(active.token)


def _client_span(method: str | bytes) -> tuple[Span, str] | None:
    tracer = _tracer(_service_var.get())
    if tracer is None:
        return None
    name = (method.decode() if isinstance(method, bytes) else method).lstrip("/")
    rpc_service, rpc_method = metrics.split_method(name)
    span = tracer.start_span(
        name,
        kind=SpanKind.CLIENT,
        attributes={"rpc.system": "grpc", "rpc.service": rpc_service, "rpc.method": rpc_method},
    )
    return span, name


def start_client_span(method: str | bytes) -> Span | None:
    """The client span of an outgoing call (None while tracing is off); the in-process
    transport (shared/inproc.py) uses it as the interceptors below do."""
    started = _client_span(method)
    return None if started is None else started[0]


def trace_metadata(span: Span) -> tuple[tuple[str, str], ...]:
    """The trace context of `span` as call metadata (W3C traceparent)."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(span))
    return tuple(carrier.items())


def _with_trace_context(
    details: grpc.aio.ClientCallDetails, span: Span
) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    for key, value in trace_metadata(span):
        metadata.add(key, value)
    # A namedtuple at run time; the grpc stubs declare a plain class.
    replaced: grpc.aio.ClientCallDetails = details._replace(  # type: ignore[attr-defined]
        metadata=metadata
    )
    return replaced


def end_client_span(span: Span, code: grpc.StatusCode) -> None:
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if code is not grpc.StatusCode.OK:
        span.set_status(Status(StatusCode.ERROR, code.name))
    span.end()


async def _end_when_done(span: Span, call: grpc.aio.Call) -> None:
    end_client_span(span, await call.code())


def client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """The interceptors of a traced channel: a client span per outgoing call, its trace
    context injected into the metadata. (agentmesh has no client-streaming RPCs; those would
    pass untraced.) One object per call shape: grpc.aio files an interceptor under the
    first shape it implements only."""
    return [_UnaryUnaryTracing(), _UnaryStreamTracing()]


class _UnaryUnaryTracing(grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        started = _client_span(details.method)
        if started is None:
            return await continuation(details, request)
        span = started[0]
        try:
            call = await continuation(_with_trace_context(details, span), request)
            code = await call.code()
        except asyncio.CancelledError:
            end_client_span(span, grpc.StatusCode.CANCELLED)
            raise
        except BaseException:
            end_client_span(span, grpc.StatusCode.UNKNOWN)
            raise
        end_client_span(span, code)
        return call


class _UnaryStreamTracing(grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        started = _client_span(details.method)
        if started is None:
            return await continuation(details, request)
        span = started[0]
        try:
            call = await continuation(_with_trace_context(details, span), request)
        except BaseException:
            end_client_span(span, grpc.StatusCode.UNKNOWN)
            raise

        def done(finished: grpc.aio.Call) -> None:
            task = asyncio.get_running_loop().create_task(_end_when_done(span, finished))
            _pending.add(task)
            task.add_done_callback(_pending.discard)

        call.add_done_callback(done)
        return call


class HttpMiddleware:
    """ASGI middleware of the gateway: a server span per HTTP request (an incoming W3C
    traceparent is honoured; the gRPC calls made while serving it are its children) and the
    HTTP request metrics, labelled by route template ("/api/v1/threads/{thread_id}"), never
    by raw path."""

    def __init__(self, app: ASGIApp, service: str = "gateway") -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (_provider is None and not metrics.enabled()):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method: str = scope.get("method", "")
        status = 0
        active: Active | None = None
        tracer = _tracer(self.service)
        if tracer is not None:
            headers = {
                k.decode("latin-1"): v.decode("latin-1")
                for k, v in scope.get("headers", ())
                if k in (b"traceparent", b"tracestate")
            }
            span = tracer.start_span(
                method,
                context=_propagator.extract(headers),
                kind=SpanKind.SERVER,
                attributes={"http.request.method": method},
            )
            active = Active(span, self.service)

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            # No response started: the exception escaped every handler (a 500 for the client).
            status = status or 500
            metrics.http_request(method, route, status, time.perf_counter() - started)
            if active is not None:
                span = active.span
                span.update_name(f"{method} {route}")
                span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
                span.end()
                _service_var.reset(active.service_token)
                otel_context.detach(active.token)
