"""Usage on every run that called a model (issue 32 item 5), against the real suite whose
model card points at an OpenAI-compatible stub (tests/model/fake_openai.py): a run whose
model stream is cut mid-way, and a run cancelled mid-stream, report what the model call used
on their terminal event (RUN_ERROR, RUN_FINISHED) and their run record, counted by agentmesh
and marked estimated (the stub reports no usage before its stream's end, as OpenAI's
servers), and those tokens count toward the tokens-per-day quota."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.gateway.usage import TOKENS_CACHE_SECONDS
from services.launcher import Suite
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import _dump_logs, make_suite, parse_sse, run_body, token
from tests.e2e.test_model_faults import KEY, ThreadedFake, _card, _chunk
from tests.model.fake_openai import FakeOpenAI, Reply, events

# A long question: its input tokens are far more than a broken stream's few output tokens.
QUESTION = "Tell me about tea. " * 40


@pytest.fixture(scope="module")
def stubbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Suite, FakeOpenAI]]:
    fake = ThreadedFake()
    tmp = tmp_path_factory.mktemp("usage")
    cards = tmp / "cards"
    cards.mkdir()
    _card(cards / "fault.yaml", "fault", fake.fake.base_url)
    prefix = f"u{uuid.uuid4().hex[:10]}_"
    s = make_suite(
        tmp,
        prefix,
        AGENTMESH_MODEL_PROVIDER="openai",
        AGENTMESH_MODEL_CARD="fault",
        AGENTMESH_MODEL_CARDS_DIR=str(cards),
        FAULT_MODEL_KEY=KEY,
    )
    try:
        s.start(timeout=90)
    except RuntimeError:
        s.stop()
        _dump_logs(tmp / "logs")
        fake.stop()
        raise
    yield s, fake.fake
    s.stop()
    fake.stop()
    if USES_POSTGRES:
        asyncio.run(drop_schemas(prefix))


def _auth(owner: str, *, admin: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(owner, admin=admin)}"}


def _tokens(usage: list[dict[str, Any]]) -> tuple[int, int, bool]:
    [u] = usage
    assert u["totalTokens"] == u["inputTokens"] + u["outputTokens"]
    return u["inputTokens"], u["outputTokens"], bool(u.get("estimated"))


def _record_usage(suite: Suite, owner: str, run_id: str) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/runs/{run_id}", headers=_auth(owner), timeout=30
    )
    assert resp.status_code == 200, resp.text
    usage: list[dict[str, Any]] = resp.json()["usage"]
    return usage


def _tokens_today(suite: Suite, owner: str) -> int:
    resp = httpx.get(f"{suite.gateway_url}/api/v1/usage", headers=_auth(owner), timeout=30)
    assert resp.status_code == 200, resp.text
    return int(resp.json()["current"]["tokensToday"])


def _over_the_day(suite: Suite, owner: str, tokens: int) -> httpx.Response:
    """The next run once the owner's tokens per day are what its runs used."""
    put = httpx.put(
        f"{suite.gateway_url}/api/v1/admin/owners/{owner}/quotas",
        json={"tokensPerDay": tokens},
        headers=_auth("ops", admin=True),
        timeout=30,
    )
    assert put.status_code == 200, put.text
    time.sleep(TOKENS_CACHE_SECONDS + 0.2)
    return httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=run_body(f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}", "again"),
        headers=_auth(owner),
        timeout=30,
    )


def test_a_run_whose_model_stream_broke_reports_its_usage(
    stubbed: tuple[Suite, FakeOpenAI],
) -> None:
    suite, fake = stubbed
    owner, run_id = f"u-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    first = events(_chunk({"content": "Tea is a drink made "}), done=False).body
    streamed = events(_chunk({"content": "Tea is a drink made "}), _chunk({"content": "from"}))
    # Cut inside the second chunk: the first one's text streamed.
    cut = len(first) + 20
    fake.replies[:] = [Reply(body=streamed.body, headers=streamed.headers, cut_after=cut)]
    resp = httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=run_body(f"t-{run_id}", run_id, QUESTION),
        headers=_auth(owner),
        timeout=60,
    )
    failed = parse_sse(resp.content)

    end = failed[-1]
    assert end["type"] == "RUN_ERROR" and end["code"] == "MODEL_STREAM_BROKEN", end
    assert any(e["type"] == "TEXT_MESSAGE_CONTENT" for e in failed)  # it streamed, then broke
    inp, out, estimated = _tokens(end["usage"])  # type: ignore[arg-type]
    assert inp > 100 and out > 0 and estimated
    assert _record_usage(suite, owner, run_id) == end["usage"]
    assert _tokens_today(suite, owner) == inp + out
    over = _over_the_day(suite, owner, inp + out)
    assert over.status_code == 429, over.text


def test_a_run_cancelled_mid_stream_reports_its_usage(stubbed: tuple[Suite, FakeOpenAI]) -> None:
    suite, fake = stubbed
    owner, run_id = f"u-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    # The model streams a few words, then says nothing more for a minute.
    hanging = events(_chunk({"content": "Tea is a drink"}), done=False)
    fake.replies[:] = [Reply(body=hanging.body, headers=hanging.headers, linger=60)]
    seen: list[dict[str, Any]] = []
    with (
        httpx.Client(base_url=suite.gateway_url, timeout=60) as client,
        client.stream(
            "POST",
            "/api/v1/agent/runs",
            json=run_body(f"t-{run_id}", run_id, QUESTION),
            headers=_auth(owner),
        ) as resp,
    ):
        assert resp.status_code == 200
        cancelled = False
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            seen.append(json.loads(line[len("data: ") :]))
            if seen[-1]["type"] == "TEXT_MESSAGE_CONTENT" and not cancelled:
                cancel = client.post(f"/api/v1/agent/runs/{run_id}:cancel", headers=_auth(owner))
                assert cancel.status_code in (200, 202), cancel.text
                cancelled = True

    end = seen[-1]
    assert end["type"] == "RUN_FINISHED" and end["outcome"] == {"type": "cancelled"}, end
    inp, out, estimated = _tokens(end["usage"])
    assert inp > 100 and out > 0 and estimated
    assert _record_usage(suite, owner, run_id) == end["usage"]
    assert _tokens_today(suite, owner) == inp + out
    over = _over_the_day(suite, owner, inp + out)
    assert over.status_code == 429, over.text
