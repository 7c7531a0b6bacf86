"""Prometheus metrics of every service (prometheus-client, the process's default registry).

Off until something serves them: a gRPC service serves /metrics on AGENTMESH_METRICS_PORT
(shared/server.py; 0 = off, the default), the gateway on its own HTTP port. While off,
every helper below returns after one flag check, so nothing is recorded that nobody reads.

The names and labels, one place to read them:

| metric | labels | recorded by |
|---|---|---|
| agentmesh_grpc_server_handled_total | grpc_service, grpc_method, grpc_code | interceptors |
| agentmesh_grpc_server_handling_seconds | grpc_service, grpc_method, grpc_code | interceptors |
| agentmesh_http_requests_total | method, route, status | telemetry.HttpMiddleware |
| agentmesh_http_request_duration_seconds | method, route, status | telemetry.HttpMiddleware |
| agentmesh_run_first_event_seconds | | the gateway: run_first_event |
| agentmesh_runs_total | state, profile | the orchestrator: run_started / run_ended |
| agentmesh_runs_in_progress | profile | the orchestrator: run_started / run_ended |
| agentmesh_run_events_total | type | the orchestrator: event_emitted |
| agentmesh_scheduler_due_backlog | | the scheduler: set_due_backlog |
| agentmesh_scheduler_dispatch_lag_seconds | | the scheduler: observe_dispatch_lag |
| agentmesh_tool_denials_total | reason | the executor: tool_denied |
| agentmesh_memory_search_total | mode, reason | the memory service: memory_searched |
| agentmesh_memory_query_embedding_seconds | | the memory service: query_embedded |

Label values come from bounded sets (method names, status codes, event types, route
templates, denial reasons, search modes and their reasons); profile names are capped
(PROFILE_LABEL_LIMIT, then "other") because a job may carry its own profile snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

# Latency buckets (seconds) from a cache hit to a long model call.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# A run's time to first event (seconds): milliseconds unloaded, tens to hundreds under load.
_FIRST_EVENT_BUCKETS = (
    0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08,
    0.09, 0.1, 0.125, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5, 10, 30,
)  # fmt: skip
# Dispatch lag (seconds): a due slot normally goes out within a claim interval.
_LAG_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)

PROFILE_LABEL_LIMIT = 50

RPC_HANDLED = Counter(
    "agentmesh_grpc_server_handled_total",
    "gRPC calls handled, by method and status code.",
    ["grpc_service", "grpc_method", "grpc_code"],
)
RPC_SECONDS = Histogram(
    "agentmesh_grpc_server_handling_seconds",
    "gRPC call latency (a streaming call: until its last message), by method and status.",
    ["grpc_service", "grpc_method", "grpc_code"],
    buckets=_LATENCY_BUCKETS,
)
HTTP_REQUESTS = Counter(
    "agentmesh_http_requests_total",
    "HTTP requests served by the gateway, by route template and status.",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "agentmesh_http_request_duration_seconds",
    "HTTP request latency (an SSE run: the whole stream), by route template and status.",
    ["method", "route", "status"],
    buckets=_LATENCY_BUCKETS,
)
RUNS = Counter(
    "agentmesh_runs_total",
    "Runs that entered a state (RUNNING when started, then SUCCEEDED, FAILED, ...), by profile.",
    ["state", "profile"],
)
RUNS_IN_PROGRESS = Gauge(
    "agentmesh_runs_in_progress",
    "Runs started and not yet ended in this process, by profile.",
    ["profile"],
)
EVENTS = Counter(
    "agentmesh_run_events_total",
    "Run events emitted (appended to the run event log), by event type.",
    ["type"],
)
DUE_BACKLOG = Gauge(
    "agentmesh_scheduler_due_backlog",
    "Job runs that are due and not yet dispatched to the orchestrator, at the last claim pass.",
)
DISPATCH_LAG = Histogram(
    "agentmesh_scheduler_dispatch_lag_seconds",
    "From a job slot's due time to its dispatch to the orchestrator.",
    buckets=_LAG_BUCKETS,
)
TOOL_DENIALS = Counter(
    "agentmesh_tool_denials_total",
    "Tool calls refused before they ran, by reason.",
    ["reason"],
)
MEMORY_SEARCHES = Counter(
    "agentmesh_memory_search_total",
    "Memory searches, by mode (hybrid: words and meaning; lexical: words only) and, for "
    "lexical, why (no_embedding_model, embedding_model_down, embedding_timeout, "
    "embedding_failed; empty for hybrid).",
    ["mode", "reason"],
)
QUERY_EMBEDDING = Histogram(
    "agentmesh_memory_query_embedding_seconds",
    "Embedding one search's query by the embedding model (answered in time or not).",
    buckets=_LATENCY_BUCKETS,
)

RUN_FIRST_EVENT = Histogram(
    "agentmesh_run_first_event_seconds",
    "From a run's POST reaching the gateway to its first event sent on the 200 stream.",
    buckets=_FIRST_EVENT_BUCKETS,
)

_enabled = False
_lock = threading.Lock()
_profiles: set[str] = set()
_event_children: dict[str, Counter] = {}


def enabled() -> bool:
    return _enabled


def enable() -> None:
    """Start recording (called by whatever serves the metrics)."""
    global _enabled
    _enabled = True


def serve(port: int, host: str) -> Callable[[], None]:
    """Serve GET /metrics on host:port in a background thread; returns the stop function."""
    server, thread = start_http_server(port, addr=host)
    enable()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop


def exposition() -> tuple[bytes, str]:
    """The text exposition of every metric, and its content type (the gateway's /metrics)."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def split_method(method: str) -> tuple[str, str]:
    """ "/pkg.Service/Method" -> ("pkg.Service", "Method")."""
    service, _, name = method.lstrip("/").rpartition("/")
    return service, name


def rpc_handled(service: str, method: str, code: str, seconds: float) -> None:
    if not _enabled:
        return
    RPC_HANDLED.labels(service, method, code).inc()
    RPC_SECONDS.labels(service, method, code).observe(seconds)


def http_request(method: str, route: str, status: int, seconds: float) -> None:
    if not _enabled:
        return
    code = str(status)
    HTTP_REQUESTS.labels(method, route, code).inc()
    HTTP_SECONDS.labels(method, route, code).observe(seconds)


def http_request_of(method: str, route: str, status: int) -> Callable[[float], None]:
    """`http_request` of one method, route and status, its labels looked up once: for a
    path that answers many requests alike (the gateway's refusals under overload)."""
    code = str(status)
    children: list[Any] = []

    def record(seconds: float) -> None:
        if not _enabled:
            return
        if not children:
            children.append(HTTP_REQUESTS.labels(method, route, code))
            children.append(HTTP_SECONDS.labels(method, route, code))
        children[0].inc()
        children[1].observe(seconds)

    return record


def run_first_event(seconds: float) -> None:
    """A run's first event was sent, `seconds` after its request reached the gateway."""
    if not _enabled:
        return
    RUN_FIRST_EVENT.observe(seconds)


def _profile_label(profile: str) -> str:
    if profile in _profiles:
        return profile
    with _lock:
        if len(_profiles) >= PROFILE_LABEL_LIMIT:
            return "other"
        _profiles.add(profile)
    return profile


def run_started(profile: str) -> None:
    """A run of `profile` started (call once per run, where its state becomes RUNNING)."""
    if not _enabled:
        return
    label = _profile_label(profile)
    RUNS.labels("RUNNING", label).inc()
    RUNS_IN_PROGRESS.labels(label).inc()


def run_ended(profile: str, state: str) -> None:
    """A run of `profile` ended in `state` (SUCCEEDED, FAILED, CANCELLED, INTERRUPTED...)."""
    if not _enabled:
        return
    label = _profile_label(profile)
    RUNS.labels(state, label).inc()
    RUNS_IN_PROGRESS.labels(label).dec()


def event_emitted(event: Any) -> None:
    """One agentmesh.type.v1.RunEvent emitted; counted by its payload ("text_message_content")."""
    if not _enabled:
        return
    event_type = event.WhichOneof("payload") or "unknown"
    # Per-token events: keep the labelled child instead of resolving labels every time.
    child = _event_children.get(event_type)
    if child is None:
        child = _event_children.setdefault(event_type, EVENTS.labels(event_type))
    child.inc()


def set_due_backlog(count: int) -> None:
    if _enabled:
        DUE_BACKLOG.set(count)


def observe_dispatch_lag(seconds: float) -> None:
    if _enabled:
        DISPATCH_LAG.observe(max(0.0, seconds))


def tool_denied(reason: str) -> None:
    """A tool call refused before it ran; `reason` e.g. "NOT_ALLOWED_BY_PROFILE"."""
    if _enabled:
        TOOL_DENIALS.labels(reason).inc()


def memory_searched(mode: str, reason: str) -> None:
    """A memory search ran in `mode` ("hybrid" / "lexical"), `reason` saying why lexical."""
    if _enabled:
        MEMORY_SEARCHES.labels(mode, reason).inc()


def query_embedded(seconds: float) -> None:
    if _enabled:
        QUERY_EMBEDDING.observe(seconds)
