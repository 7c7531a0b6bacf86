"""OpenTelemetry tracing: one trace per run across the services, W3C context in metadata,
ids as attributes (the owner only hashed), nothing when tracing is off."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

import grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from shared import logs, telemetry
from shared.clients import open_channel
from shared.server import GrpcServer, ServiceParts
from shared.settings import Settings
from tests.grpc_helpers import owner_md
from tests.observability.suite import bearer, gateway, run_body, running_suite

_PROBE = "agentmesh.test.Probe"


async def _settled(exporter: InMemorySpanExporter, *, must_have: str) -> list[ReadableSpan]:
    """The finished spans once one named `must_have` is there and no more arrive (a run's
    last calls end after the client saw its last event)."""
    last = -1
    for _ in range(200):
        found = list(exporter.get_finished_spans())
        if len(found) == last and any(s.name == must_have for s in found):
            return found
        last = len(found)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no settled trace with {must_have}: {[s.name for s in found]}")


def _scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope else ""


async def test_one_chat_run_is_one_trace_tree_rooted_at_the_gateway(
    settings: Settings, spans: InMemorySpanExporter
) -> None:
    thread_id, run_id = uuid.uuid4().hex, uuid.uuid4().hex
    text = f"tell me about {uuid.uuid4().hex[:8]}"
    async with running_suite(settings) as suite, gateway(suite.settings) as http:
        resp = await http.post(
            "/api/v1/agent/runs",
            json=run_body(thread_id, run_id, text),
            headers=bearer(suite.settings, "alice"),
        )
        assert resp.status_code == 200 and "RUN_FINISHED" in resp.text
        found = await _settled(spans, must_have="agentmesh.history.v1.HistoryService/FinishRun")

    assert len({s.context.trace_id for s in found}) == 1
    by_id = {s.context.span_id: s for s in found}
    roots = [s for s in found if s.parent is None]
    assert [(r.name, _scope(r)) for r in roots] == [
        ("POST /api/v1/agent/runs", "agentmesh.gateway")
    ]
    # Every other span hangs off a span of the same trace: a tree.
    assert all(s.parent.span_id in by_id for s in found if s.parent is not None)
    servers = {(s.name, _scope(s)) for s in found if s.kind is SpanKind.SERVER}
    assert {
        ("agentmesh.orchestrator.v1.OrchestratorService/StartRun", "agentmesh.orchestrator"),
        ("agentmesh.history.v1.HistoryService/BeginRun", "agentmesh.history"),
        ("agentmesh.router.v1.RouterService/Route", "agentmesh.router"),
        ("agentmesh.executor.v1.ExecutorService/Execute", "agentmesh.executor"),
        ("agentmesh.history.v1.HistoryService/FinishRun", "agentmesh.history"),
    } <= servers
    # A server span's parent is the client span of the call, made by the calling service.
    route = next(
        s for s in found if s.name.endswith("RouterService/Route") and s.kind is SpanKind.SERVER
    )
    # A server span under test has its parent.
    client = by_id[route.parent.span_id]  # type: ignore[union-attr]
    assert client.kind is SpanKind.CLIENT and _scope(client) == "agentmesh.orchestrator"
    start = next(s for s in found if s.name.endswith("StartRun") and s.kind is SpanKind.SERVER)
    attrs = dict(start.attributes or {})
    assert attrs[telemetry.RUN_ID] == run_id and attrs[telemetry.THREAD_ID] == thread_id
    assert attrs[telemetry.OWNER_HASH] == telemetry.owner_hash("alice")
    assert attrs["rpc.method"] == "StartRun" and "rpc.grpc.status_code" in attrs
    execute = next(s for s in found if s.name.endswith("Execute") and s.kind is SpanKind.SERVER)
    assert (execute.attributes or {})[telemetry.PROFILE] == "chat_default"
    # Ids, never contents or the raw owner id.
    for span in found:
        values = json.dumps({k: str(v) for k, v in (span.attributes or {}).items()})
        assert text.split()[-1] not in values and '"alice"' not in values


def _probe_parts(seen: list[dict[str, str]]) -> ServiceParts:
    async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen.append({k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)})
        if request == b"fail":
            from shared.errors import NotFound

            raise NotFound("no such thing")
        return b"ok"

    def register(server: grpc.aio.Server) -> None:
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    _PROBE, {"Call": grpc.unary_unary_rpc_method_handler(call)}
                ),
            )
        )

    return ServiceParts(register=register, service_names=[_PROBE])


async def _probe(seen: list[dict[str, str]]) -> tuple[GrpcServer, str]:
    server = GrpcServer("probe", _probe_parts(seen), grace_seconds=0.5)
    port = await server.start("127.0.0.1", 0)
    return server, f"127.0.0.1:{port}"


async def test_server_span_continues_the_callers_traceparent(
    spans: InMemorySpanExporter,
) -> None:
    trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    server, addr = await _probe([])
    try:
        async with grpc.aio.insecure_channel(addr) as ch:
            md = (("traceparent", f"00-{trace_id}-{parent_id}-01"), *owner_md("bob"))
            with pytest_raises_rpc(grpc.StatusCode.NOT_FOUND):
                await ch.unary_unary(f"/{_PROBE}/Call")(b"fail", metadata=md)
    finally:
        await server.stop()
    [span] = [s for s in spans.get_finished_spans() if s.name == f"{_PROBE}/Call"]
    assert format(span.context.trace_id, "032x") == trace_id
    assert span.parent is not None and format(span.parent.span_id, "016x") == parent_id
    attrs = dict(span.attributes or {})
    assert attrs["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert attrs[telemetry.OWNER_HASH] == telemetry.owner_hash("bob") != "bob"


class pytest_raises_rpc:
    def __init__(self, code: grpc.StatusCode) -> None:
        self.code = code

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        assert isinstance(exc, grpc.aio.AioRpcError) and exc.code() == self.code, exc
        return True


async def test_channel_sends_trace_context_only_while_tracing_is_on(settings: Settings) -> None:
    seen: list[dict[str, str]] = []
    server, addr = await _probe(seen)
    try:
        off = open_channel(addr)
        await off.unary_unary(f"/{_PROBE}/Call")(b"x", timeout=5)
        exporter = InMemorySpanExporter()
        telemetry.configure("test", settings, exporter=exporter)
        try:
            on = open_channel(addr)
            await on.unary_unary(f"/{_PROBE}/Call")(b"x", timeout=5)
            await on.close()
        finally:
            telemetry.shutdown()
        await off.close()
    finally:
        await server.stop()
    assert "traceparent" not in seen[0]
    assert "traceparent" in seen[1]
    kinds = sorted(s.kind.name for s in exporter.get_finished_spans())
    assert kinds == ["CLIENT", "SERVER"]


def test_tracing_stays_off_without_an_otlp_endpoint(settings: Settings) -> None:
    assert settings.otlp_endpoint == ""
    assert telemetry.configure("test", settings) is False
    assert not telemetry.enabled()
    telemetry.annotate(run_id="r")  # a no-op, not an error


def test_otlp_endpoint_turns_tracing_on(settings: Settings) -> None:
    # Nothing listens there: the batch exporter only tries when spans are flushed.
    configured = settings.model_copy(update={"otlp_endpoint": "http://127.0.0.1:9"})
    try:
        assert telemetry.configure("history", configured) is True
        assert telemetry.enabled()
    finally:
        telemetry._install(None, "")  # drop it without a flush to a dead collector


def test_log_lines_carry_the_trace_and_span_id_of_the_active_span(
    spans: InMemorySpanExporter,
) -> None:
    tracer = telemetry._tracer("test")
    assert tracer is not None
    formatter = logs.JsonFormatter("test")
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "hello", None, None)
    assert "trace_id" not in json.loads(formatter.format(record))
    with tracer.start_as_current_span("work") as span:
        line = json.loads(formatter.format(record))
    ctx = span.get_span_context()
    assert line["trace_id"] == format(ctx.trace_id, "032x")
    assert line["span_id"] == format(ctx.span_id, "016x")
