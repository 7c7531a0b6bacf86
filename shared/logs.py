"""Structured JSON logs with the request id, the run and thread ids where known (services
set them; the server interceptor sets them from the request's run_id/thread_id fields), and
the trace and span ids while a span is active.

Message contents, memories and tool arguments are not logged: a log call passes ids, names
and sizes. `contents_enabled()` (AGENTMESH_LOG_CONTENTS, a debugging aid, never on in
production) is the one switch for code that would log contents.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time

from opentelemetry import trace

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
run_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("run_id", default="")
thread_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("thread_id", default="")

_log_contents = False
# Libraries whose debug output carries contents: aiosqlite logs every statement with its
# parameters (message texts, memories) at DEBUG, SQLAlchemy does at INFO when its logger is
# enabled. They log at WARNING and above unless contents may be logged.
LIBRARY_LOGGERS: tuple[str, ...] = ("aiosqlite", "sqlalchemy.engine", "sqlalchemy.pool")


def contents_enabled() -> bool:
    """Whether contents (messages, memories, tool arguments) may be logged."""
    return _log_contents


def set_contents_enabled(value: bool) -> None:
    global _log_contents
    _log_contents = value


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, var in (
            ("request_id", request_id_var),
            ("run_id", run_id_var),
            ("thread_id", thread_id_var),
        ):
            value = var.get()
            if value:
                entry[key] = value
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            entry["trace_id"] = format(span_context.trace_id, "032x")
            entry["span_id"] = format(span_context.span_id, "016x")
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            entry.update(extra)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(service: str, level: str = "INFO", *, contents: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.Formatter.converter = time.gmtime
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if contents else logging.WARNING)
    set_contents_enabled(contents)
