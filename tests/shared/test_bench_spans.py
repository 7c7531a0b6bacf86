"""bench/spans.py's analysis: a run's traced spans in, the table of where its time goes out."""

from __future__ import annotations

import pytest

from bench.spans import HTTP_ROOT, PIPELINE, Span, analyse, table_rows

MS = 1_000_000
NAMES = dict(PIPELINE)
# (label, client start/end, server start/end) in ms after the HTTP request started.
CALLS = (
    ("StartRun", (1.0, 29.0), (2.0, 28.0)),
    ("BeginRun", (3.0, 7.0), (4.0, 6.0)),
    ("Route", (8.0, 10.0), (8.5, 9.5)),
    ("Execute", (11.0, 20.0), (12.0, 19.0)),
    ("FinishRun", (21.0, 25.0), (22.0, 24.0)),
)
HTTP_END = 30.0


def run_spans(trace: str, t0: int, *, begin_server_ms: float = 2.0, lost: str = "") -> list[Span]:
    """One run's spans as the services export them; the server span of RPC `lost` starts
    a trace of its own (its service did not read the trace context)."""
    spans = [Span(trace, f"{trace}-http", "", HTTP_ROOT, "server", "gateway", t0, t0 + 30 * MS)]
    for label, (c0, c1), (s0, s1) in CALLS:
        caller = f"{trace}-http" if label == "StartRun" else f"{trace}-StartRun-server"
        client_id = f"{trace}-{label}-client"
        if label == "BeginRun":
            s1 = s0 + begin_server_ms
        spans.append(
            Span(
                trace,
                client_id,
                caller,
                NAMES[label],
                "client",
                "orchestrator",
                t0 + int(c0 * MS),
                t0 + int(c1 * MS),
            )
        )
        server_trace, parent = (f"{trace}-lost", "") if label == lost else (trace, client_id)
        spans.append(
            Span(
                server_trace,
                f"{trace}-{label}-server",
                parent,
                NAMES[label],
                "server",
                label,
                t0 + int(s0 * MS),
                t0 + int(s1 * MS),
            )
        )
    return spans


def test_rows_follow_the_pipeline_and_split_the_request_into_rpcs_and_gaps() -> None:
    rows = table_rows(analyse(run_spans("a", 10**18)))

    assert [r.step for r in rows] == [
        "HTTP request, end to end (root span)",
        "gap: HTTP request start → StartRun call",
        "StartRun",
        "gap: StartRun call → StartRun handler",
        "gap: StartRun handler → BeginRun",
        "BeginRun",
        "gap: BeginRun → Route",
        "Route",
        "gap: Route → Execute",
        "Execute",
        "gap: Execute → FinishRun",
        "FinishRun",
        "gap: FinishRun → HTTP response end",
        "gaps total (critical path outside RPCs)",
    ]
    by_step = {r.step: r for r in rows}
    begin = by_step["BeginRun"]
    assert (begin.starts_at_p50, begin.p50, begin.server_p50, begin.hop_p50) == (3.0, 4.0, 2.0, 2.0)
    assert by_step["gap: StartRun handler → BeginRun"].p50 == 1.0
    assert by_step["gap: FinishRun → HTTP response end"].p50 == 5.0
    # The critical path covers the request exactly: the gaps plus the orchestrator's calls.
    calls = sum(by_step[label].p50 for label, _ in PIPELINE[1:])
    assert by_step["gaps total (critical path outside RPCs)"].p50 + calls == pytest.approx(HTTP_END)


def test_statistics_are_over_the_runs_after_the_warm_up() -> None:
    since = 10**18
    spans = run_spans("warm", since - 10**9, begin_server_ms=100.0)
    for n, server_ms in enumerate((1.0, 2.0, 3.0, 3.5)):
        spans += run_spans(f"run{n}", since + n * 10**9, begin_server_ms=server_ms)

    analysis = analyse(spans, since)

    assert analysis["runs"] == 4
    assert analysis["entries"]["BeginRun server"]["duration_ms"] == {"p50": 2.5, "p90": 3.5, "n": 4}
    begin = next(r for r in table_rows(analysis) if r.step == "BeginRun")
    assert (begin.server_p50, begin.hop_p50) == (2.5, 1.5)


def test_a_service_that_drops_the_trace_context_is_reported_not_joined() -> None:
    analysis = analyse(run_spans("a", 10**18, lost="Execute"))

    assert analysis["propagation"]["Execute"] == {
        "runs": 1,
        "client_in_trace": 1,
        "server_child_of_client": 0,
    }
    assert analysis["propagation"]["Route"]["server_child_of_client"] == 1
    assert analysis["other_traces"] == {NAMES["Execute"]: 1}
    execute = next(r for r in table_rows(analysis) if r.step == "Execute")
    assert (execute.p50, execute.server_p50, execute.hop_p50) == (9.0, None, None)
