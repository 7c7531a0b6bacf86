"""An owner deletion's gateway step that fails records a worded error: the owner reads it in
the deletion record (`lastError`), so the driver's text (its SQL, its parameters) stays in
the log."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from services.gateway import lifecycle
from services.gateway.errors import ApiError
from services.gateway.webhook_store import WebhookStore


async def test_a_failed_gateway_step_is_unavailable_without_the_databases_own_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A database without the gateway's tables: every statement of the step fails.
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")
    try:
        with pytest.raises(ApiError) as caught:
            await lifecycle._gateway_step(WebhookStore(engine), "alice")
    finally:
        await engine.dispose()
    err = caught.value
    assert (err.status, err.code) == (503, "UNAVAILABLE")
    for internal in ("no such table", "DELETE", "SELECT", "webhook_", "alice"):
        assert internal not in err.message
    assert "no such table" in caplog.text  # the detail is logged for the operator
