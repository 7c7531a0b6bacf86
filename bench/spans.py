"""Where a chat run's time goes, from the suite's own traces: every service exports its spans
(shared/telemetry.py) to a small OTLP collector in this process while clients drive runs,
one at a time by default, or --concurrency at once (where the time goes under load).

    python -m bench.spans [--backend postgres|embedded] [--duration 10] [--concurrency 1]
                          [--out results]

One trace per run, rooted at the gateway's HTTP span. For each run the timeline is taken
relative to the root's start: every RPC of the pipeline (StartRun, BeginRun, Route, Execute,
FinishRun) with its client span, its server span and their difference (the gRPC hop and
queueing), and the gaps between them on the critical path (gateway and orchestrator work
outside any RPC: request handling, event-log writes, relaying the stream). Writes
<out>/spans-c<concurrency>.json and .md and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from bench.stats import percentile

ROOT = Path(__file__).resolve().parent.parent

HTTP_ROOT = "POST /api/v1/agent/runs"
# The chat pipeline's RPCs in the order a run makes them: (label, span name). The gateway
# calls StartRun; the orchestrator's run task makes the others, inside StartRun's handler.
PIPELINE = (
    ("StartRun", "agentmesh.orchestrator.v1.OrchestratorService/StartRun"),
    ("BeginRun", "agentmesh.history.v1.HistoryService/BeginRun"),
    ("Route", "agentmesh.router.v1.RouterService/Route"),
    ("Execute", "agentmesh.executor.v1.ExecutorService/Execute"),
    ("FinishRun", "agentmesh.history.v1.HistoryService/FinishRun"),
)
LEGEND = (
    "Times in ms from the start of the gateway's HTTP span. An RPC's row: its client span"
    " (the caller's view), its server span (the handler's) and their difference, the gRPC hop"
    " both ways plus queueing. A gap: time on the critical path inside no RPC (the gateway's"
    " and the orchestrator's own work, event-log writes, relaying the stream back)."
)
NOTE = (
    "Tracing adds its own overhead (a span per RPC on both sides, the trace context in every "
    "call, the exporters' batches), so these numbers are somewhat higher than the untraced "
    "benchmark's."
)

_KINDS = {
    trace_pb2.Span.SPAN_KIND_SERVER: "server",
    trace_pb2.Span.SPAN_KIND_CLIENT: "client",
    trace_pb2.Span.SPAN_KIND_INTERNAL: "internal",
    trace_pb2.Span.SPAN_KIND_PRODUCER: "producer",
    trace_pb2.Span.SPAN_KIND_CONSUMER: "consumer",
}


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    name: str
    kind: str  # "server", "client", ...
    service: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class Row:
    """One line of the table; durations in ms, None where a column does not apply."""

    step: str
    starts_at_p50: float | None
    p50: float
    p90: float
    server_p50: float | None = None
    server_p90: float | None = None
    hop_p50: float | None = None
    hop_p90: float | None = None


# ---- the collector ------------------------------------------------------------------


def spans_of(request: trace_service_pb2.ExportTraceServiceRequest) -> list[Span]:
    out = []
    for resource_spans in request.resource_spans:
        service = next(
            (
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            ),
            "",
        )
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                out.append(
                    Span(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        name=s.name,
                        kind=_KINDS.get(s.kind, "unspecified"),
                        service=service,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                    )
                )
    return out


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: list[Span]) -> None:
        self.sink = sink

    async def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.sink.extend(spans_of(request))
        return trace_service_pb2.ExportTraceServiceResponse()


class Collector:
    """An OTLP/gRPC trace receiver on a free port, served from a thread of its own: the
    suite is started and driven from the main thread, whose blocking calls must not stall
    the exporters (and the suite's processes die with the thread that started them)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: grpc.aio.Server | None = None

    def start(self) -> str:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return f"http://127.0.0.1:{self.port}"

    async def _start(self) -> None:
        self._server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
            _TraceService(self.spans), self._server
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(1), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()


# ---- the analysis (pure) ------------------------------------------------------------


def _ms(ns: int) -> float:
    return ns / 1e6


def _timing(span: Span, t0: int) -> tuple[float, float]:
    return _ms(span.start_ns - t0), _ms(span.end_ns - span.start_ns)


def _first(spans: Iterable[Span], name: str, kind: str) -> Span | None:
    found = [s for s in spans if s.name == name and s.kind == kind]
    return min(found, key=lambda s: s.start_ns) if found else None


def _root(spans: Sequence[Span]) -> Span | None:
    roots = [s for s in spans if not s.parent_id]
    return roots[0] if len(roots) == 1 else None


def run_timeline(spans: Sequence[Span]) -> dict[str, tuple[float, float]] | None:
    """One run's trace as {entry: (start offset from the root's start, duration)} in ms:
    "HTTP request", "<RPC> client", "<RPC> server", "<RPC> hop" (client minus server time)
    and the gaps of the critical path; None when the trace is not a whole run (no single
    HTTP root, or no StartRun client span)."""
    root = _root(spans)
    if root is None or root.name != HTTP_ROOT:
        return None
    t0 = root.start_ns
    out: dict[str, tuple[float, float]] = {"HTTP request": (0.0, _ms(root.end_ns - t0))}
    calls: list[tuple[str, Span]] = []
    servers: dict[str, Span] = {}
    for label, name in PIPELINE:
        client = _first(spans, name, "client")
        server = _first(spans, name, "server")
        if client is not None:
            calls.append((label, client))
            out[f"{label} client"] = _timing(client, t0)
        if server is not None:
            servers[label] = server
            out[f"{label} server"] = _timing(server, t0)
        if client is not None and server is not None:
            out[f"{label} hop"] = (
                _ms(client.start_ns - t0),
                _ms((client.end_ns - client.start_ns) - (server.end_ns - server.start_ns)),
            )
    if not calls or calls[0][0] != "StartRun":
        return None
    start_run = calls[0][1]
    start_server = servers.get("StartRun")
    # The critical path: the gateway until it calls StartRun, the call reaching its handler,
    # then the orchestrator's calls one after another (everything between them is its own
    # work), then the tail until the HTTP response ends.
    marks = [("HTTP request start", root.start_ns, root.start_ns)]
    marks.append(("StartRun call", start_run.start_ns, start_run.start_ns))
    if start_server is not None:
        marks.append(("StartRun handler", start_server.start_ns, start_server.start_ns))
    later = sorted(calls[1:], key=lambda call: call[1].start_ns)
    marks += [(label, s.start_ns, s.end_ns) for label, s in later]
    marks.append(("HTTP response end", root.end_ns, root.end_ns))
    for (before, _, ended), (after, began, _) in itertools.pairwise(marks):
        out[f"gap: {before} → {after}"] = (_ms(ended - t0), _ms(began - ended))
    out["gaps total"] = (0.0, sum(d for k, (_, d) in out.items() if k.startswith("gap: ")))
    return out


def links(spans: Sequence[Span]) -> dict[str, tuple[bool, bool]]:
    """Whether the trace context reached each RPC of the run: {label: (the client span's
    parent is its caller's span, the server span is the client span's child)}; labels whose
    client span is absent are left out."""
    root = _root(spans)
    start_server = _first(spans, PIPELINE[0][1], "server")
    out: dict[str, tuple[bool, bool]] = {}
    for label, name in PIPELINE:
        client = _first(spans, name, "client")
        if client is None:
            continue
        caller = root if label == "StartRun" else start_server
        server = _first(spans, name, "server")
        out[label] = (
            caller is not None and client.parent_id == caller.span_id,
            server is not None and server.parent_id == client.span_id,
        )
    return out


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 3),
        "p90": round(percentile(values, 90), 3),
        "n": len(values),
    }


def analyse(spans: Iterable[Span], since_ns: int = 0) -> dict[str, Any]:
    """Every run whose root started at or after `since_ns` (earlier ones were the warm-up):
    per-entry statistics over runs (start offset and duration, ms), per-span-name
    statistics, whether the trace context propagated, and the traces that were not runs
    (by their root's name: a service that lost the context starts a trace of its own)."""
    traces: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        traces[span.trace_id].append(span)
    entries: dict[str, list[tuple[float, float]]] = defaultdict(list)
    by_name: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    linked: dict[str, list[int]] = {label: [0, 0, 0] for label, _ in PIPELINE}
    others: dict[str, int] = defaultdict(int)
    incomplete = 0
    for trace in traces.values():
        first_start = min(s.start_ns for s in trace)
        if first_start < since_ns:
            continue
        timeline = run_timeline(trace)
        if timeline is None:
            root = _root(trace)
            if root is not None and root.name == HTTP_ROOT:
                incomplete += 1
            else:
                others[root.name if root is not None else "(no single root)"] += 1
            continue
        for key, value in timeline.items():
            entries[key].append(value)
        t0 = first_start
        for span in trace:
            by_name[(span.service, span.kind, span.name)].append(
                (_ms(span.start_ns - t0), _ms(span.end_ns - span.start_ns))
            )
        for label, (client_ok, server_ok) in links(trace).items():
            counts = linked[label]
            counts[0] += 1
            counts[1] += client_ok
            counts[2] += server_ok
    runs = len(entries.get("HTTP request", []))
    return {
        "runs": runs,
        "incomplete_runs": incomplete,
        "entries": {
            key: {
                "starts_at_ms": _stats([a for a, _ in values]),
                "duration_ms": _stats([d for _, d in values]),
            }
            for key, values in entries.items()
        },
        "spans": [
            {
                "service": service,
                "kind": kind,
                "name": name,
                "count": len(values),
                "starts_at_ms": _stats([a for a, _ in values]),
                "duration_ms": _stats([d for _, d in values]),
            }
            for (service, kind, name), values in sorted(
                by_name.items(), key=lambda kv: statistics.median(a for a, _ in kv[1])
            )
        ],
        "propagation": {
            label: {"runs": n, "client_in_trace": c, "server_child_of_client": s}
            for label, (n, c, s) in linked.items()
            if n
        },
        "other_traces": dict(others),
    }


def table_rows(analysis: dict[str, Any]) -> list[Row]:
    """The table in pipeline order: the HTTP request, then each RPC (client, server, hop)
    with the gaps of the critical path between them, then the gaps' total."""
    entries: dict[str, dict[str, dict[str, float]]] = analysis["entries"]

    def row(step: str, key: str) -> Row:
        e = entries[key]
        return Row(step, e["starts_at_ms"]["p50"], e["duration_ms"]["p50"], e["duration_ms"]["p90"])

    # Gaps sort by where they start, RPCs by where their client span starts.
    timed: list[tuple[float, Row]] = []
    for label, _ in PIPELINE:
        client = entries.get(f"{label} client")
        if client is None:
            continue
        server = entries.get(f"{label} server")
        hop = entries.get(f"{label} hop")
        timed.append(
            (
                client["starts_at_ms"]["p50"],
                Row(
                    label,
                    client["starts_at_ms"]["p50"],
                    client["duration_ms"]["p50"],
                    client["duration_ms"]["p90"],
                    server["duration_ms"]["p50"] if server else None,
                    server["duration_ms"]["p90"] if server else None,
                    hop["duration_ms"]["p50"] if hop else None,
                    hop["duration_ms"]["p90"] if hop else None,
                ),
            )
        )
    for key, e in entries.items():
        if key.startswith("gap: "):
            timed.append((e["starts_at_ms"]["p50"], row(key, key)))
    rows = [row("HTTP request, end to end (root span)", "HTTP request")]
    rows += [r for _, r in sorted(timed, key=lambda t: t[0])]
    if "gaps total" in entries:
        rows.append(row("gaps total (critical path outside RPCs)", "gaps total"))
    return rows


def markdown(rows: Sequence[Row]) -> str:
    def cell(value: float | None) -> str:
        return "" if value is None else f"{value:.2f}"

    lines = [
        "| step | starts at ms (p50) | ms p50 | ms p90 | server ms p50 | server ms p90"
        " | client - server p50 | client - server p90 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        values = (r.starts_at_p50, r.p50, r.p90, r.server_p50, r.server_p90, r.hop_p50, r.hop_p90)
        lines.append(f"| {r.step} | " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines)


# ---- the measurement ----------------------------------------------------------------


def measure(backend: str, duration: float, concurrency: int = 1) -> dict[str, Any]:
    from bench.suite import load, start_suite

    tmp = Path(tempfile.mkdtemp(prefix=f"bench-spans-{backend}-"))
    prefix = f"benchspans{uuid.uuid4().hex[:6]}_"
    collector = Collector()
    endpoint = collector.start()
    try:
        env = {
            "AGENTMESH_OTLP_ENDPOINT": endpoint,
            # The exporters' default queue (2048 spans) could drop spans between exports.
            "OTEL_BSP_MAX_QUEUE_SIZE": "100000",
        }
        suite = start_suite(backend, tmp, prefix, env)
        try:
            processes = 1 if concurrency == 1 else 2
            load(suite, concurrency, 2, processes)  # warm-up
            since = time.time_ns()
            result = load(suite, concurrency, duration, processes)
        finally:
            # Stopping flushes every process's exporter into the collector.
            suite.stop()
            if backend == "postgres":
                from tests.conftest import drop_schemas

                asyncio.run(drop_schemas(prefix))
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        collector.stop()
    analysis = analyse(collector.spans, since)
    return {"backend": backend, "concurrency": concurrency, "load": result, **analysis}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.spans")
    parser.add_argument("--backend", choices=("postgres", "embedded"), default="postgres")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "results"))
    args = parser.parse_args()
    result = measure(args.backend, args.duration, args.concurrency)
    rows = table_rows(result)
    load = result["load"]
    text = "\n".join(
        [
            f"Where a run's time goes ({args.backend}, concurrency {args.concurrency},"
            f" {result['runs']} traced runs;"
            f" client-measured under tracing: first event p50 {load['first_event']['p50_ms']} ms,"
            f" run finished p50 {load['run_finished']['p50_ms']} ms). Medians do not add up.",
            "",
            markdown(rows),
            "",
            LEGEND,
            NOTE,
            "",
        ]
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"spans-c{args.concurrency}"
    (out / f"{name}.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    (out / f"{name}.md").write_text(text)
    print(text)
    print("propagation:", json.dumps(result["propagation"]))
    if result["other_traces"] or result["incomplete_runs"]:
        print("traces that are not runs:", result["other_traces"])
        print("runs without a whole trace:", result["incomplete_runs"])


if __name__ == "__main__":
    main()
