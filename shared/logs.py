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
import traceback
from typing import Any

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

    def formatException(self, ei: Any) -> str:
        """The traceback; unless contents may be logged, with each exception's message
        withheld: it can quote what it failed on (a message, a tool's arguments)."""
        if contents_enabled():
            return super().formatException(ei)
        return "".join(_withheld(traceback.TracebackException(*ei[:3]))).rstrip("\n")


_WITHHELD = "(message withheld; AGENTMESH_LOG_CONTENTS=true shows it)"


def _withheld(te: traceback.TracebackException) -> list[str]:
    """traceback.format_exception's lines, chain included, with messages withheld."""
    lines: list[str] = []
    if te.__cause__ is not None:
        lines += _withheld(te.__cause__)
        lines.append("\nThe above exception was the direct cause of the following exception:\n\n")
    elif te.__context__ is not None and not te.__suppress_context__:
        lines += _withheld(te.__context__)
        lines.append("\nDuring handling of the above exception, another exception occurred:\n\n")
    if te.stack:
        lines.append("Traceback (most recent call last):\n")
        lines += te.stack.format()
    name = te.exc_type.__qualname__ if te.exc_type is not None else "Exception"
    module = te.exc_type.__module__ if te.exc_type is not None else ""
    if module not in ("builtins", "__main__", ""):
        name = f"{module}.{name}"
    lines.append(f"{name}: {_WITHHELD}\n")
    return lines


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
