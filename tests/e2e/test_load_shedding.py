"""Load shedding at the gateway, with the real processes: over the bound of runs in flight
(per process, per owner) POST /runs answers 503 with Retry-After at once, before anything
of the run is stored; the accepted runs go on unaffected."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import httpx
import pytest

from services.launcher import Suite
from tests.conftest import USES_POSTGRES, assert_overloaded, drop_schemas
from tests.e2e.conftest import _dump_logs, make_suite, parse_sse, run_body, serves_runs, token

SLOW = " ".join(f"word{i}" for i in range(60))  # about 3 s at 0.05 s a token


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("shedding")
    prefix = f"l{uuid.uuid4().hex[:10]}_"
    suite = make_suite(
        tmp,
        prefix,
        AGENTMESH_MAX_RUNS_IN_FLIGHT="3",
        AGENTMESH_MAX_RUNS_IN_FLIGHT_PER_OWNER="2",
        AGENTMESH_SCRIPTED_TOKEN_LATENCY="0.05",
    )
    try:
        suite.start(timeout=90)
        serves_runs(suite.gateway_url, in_a_row=1, within=60)
    except RuntimeError:
        suite.stop()
        _dump_logs(tmp / "logs")
        raise
    yield suite
    suite.stop()
    if USES_POSTGRES:
        asyncio.run(drop_schemas(prefix))


def auth(owner: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(owner)}"}


async def _started(
    stack: AsyncExitStack, client: httpx.AsyncClient, gw: str, owner: str
) -> AsyncIterator[bytes]:
    """A slow run whose stream has begun (it stays in flight until read to its end)."""
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    resp = await stack.enter_async_context(
        client.stream(
            "POST",
            f"{gw}/api/v1/agent/runs",
            json=run_body(f"t-{run_id}", run_id, SLOW),
            headers=auth(owner),
        )
    )
    assert resp.status_code == 200
    chunks = resp.aiter_raw()
    first = await anext(chunks)
    assert b"RUN_STARTED" in first

    async def rest() -> AsyncIterator[bytes]:
        yield first
        async for chunk in chunks:
            yield chunk

    return rest()


async def _refused(
    client: httpx.AsyncClient, gw: str, owner: str
) -> tuple[float, httpx.Response, str]:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    began = time.monotonic()
    resp = await client.post(
        f"{gw}/api/v1/agent/runs",
        json=run_body(f"t-{run_id}", run_id, "hello"),
        headers=auth(owner),
    )
    return time.monotonic() - began, resp, run_id


async def test_over_the_bounds_runs_are_refused_at_once_with_503_and_nothing_stored(
    bounded: Suite,
) -> None:
    gw = bounded.gateway_url
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=60))
        # Refused input takes no room (its place is given back): Alice still has both.
        for _ in range(3):
            bad = await client.post(
                f"{gw}/api/v1/agent/runs", json={"threadId": "t"}, headers=auth("shed-alice")
            )
            assert bad.status_code == 400, bad.text
        accepted = [await _started(stack, client, gw, "shed-alice") for _ in range(2)]
        owner_took, owner_refused, owner_run = await _refused(client, gw, "shed-alice")
        accepted.append(await _started(stack, client, gw, "shed-bob"))  # another owner: room
        _, process_refused, process_run = await _refused(client, gw, "shed-carol")
        bodies = [b"".join([c async for c in stream]) for stream in accepted]
        records = [
            await client.get(f"{gw}/api/v1/agent/runs/{run_id}", headers=auth(owner))
            for run_id, owner in ((owner_run, "shed-alice"), (process_run, "shed-carol"))
        ]
        threads = [
            await client.get(f"{gw}/api/v1/agent/threads/t-{run_id}/history", headers=auth(owner))
            for run_id, owner in ((owner_run, "shed-alice"), (process_run, "shed-carol"))
        ]
        # Released when the runs ended: Alice is served again.
        _, again, _ = await _refused(client, gw, "shed-alice")
    assert owner_took < 1.0, f"the refusal took {owner_took:.2f} s"
    for resp, scope in ((owner_refused, "owner"), (process_refused, "process")):
        assert_overloaded(resp, scope)
    assert all(r.status_code == 404 for r in records + threads)  # nothing of them stored
    for body in bodies:
        assert parse_sse(body)[-1]["type"] == "RUN_FINISHED"
    assert again.status_code == 200 and parse_sse(again.content)[-1]["type"] == "RUN_FINISHED"
