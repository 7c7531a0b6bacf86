"""Fixtures of the observability tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared import telemetry
from shared.settings import Settings


@pytest.fixture
def spans(settings: Settings) -> Iterator[InMemorySpanExporter]:
    """Tracing on for this test, every finished span kept in memory; off afterwards."""
    exporter = InMemorySpanExporter()
    assert telemetry.configure("test", settings, exporter=exporter)
    try:
        yield exporter
    finally:
        telemetry.shutdown()
