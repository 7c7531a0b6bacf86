"""A real suite whose model card points at an OpenAI-compatible endpoint that misbehaves
(tests/model/fake_openai.py, in a thread of this process): each fault of issue 18's "Bad
input" is a clear RUN_ERROR with its code, nothing is stored half-way, the thread takes
the next run, and neither the key nor the prompt is in any service's log."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from services.launcher import Suite, free_port
from tests.e2e.conftest import _dump_logs, make_suite, parse_sse, run_body, token
from tests.model.fake_openai import FakeOpenAI, Reply, error, events, recording

KEY = "sk-fault-test-key-0123456789abcdef"
PROMPT = "The secret word of this turn is marmalade-4821"


class ThreadedFake:
    """FakeOpenAI served by its own event loop in a daemon thread."""

    def __init__(self) -> None:
        self.fake = FakeOpenAI([])
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)

            async def start() -> asyncio.Server:
                server = await asyncio.start_server(self.fake.handle, "127.0.0.1", 0)
                self.fake.port = server.sockets[0].getsockname()[1]
                ready.set()
                return server

            server = self.loop.run_until_complete(start())
            self.loop.run_forever()
            server.close()
            for task in list(self.fake.tasks):
                task.cancel()
            self.loop.run_until_complete(server.wait_closed())
            self.loop.close()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _card(path: Path, name: str, base_url: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "provider": "openai",
                "model": "fault-model",
                "context_size": 8000,
                "output_size": 500,
                "output_types": ["text", "tool_call"],
                "base_url": base_url,
                "api_key_env": "FAULT_MODEL_KEY",
                "timeout_seconds": 5,
                "connect_timeout_seconds": 1,
                "max_retries": 0,
            }
        )
    )


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Suite, FakeOpenAI, Path]]:
    fake = ThreadedFake()
    tmp = tmp_path_factory.mktemp("faults")
    cards = tmp / "cards"
    cards.mkdir()
    _card(cards / "fault.yaml", "fault", fake.fake.base_url)
    _card(cards / "down.yaml", "down", f"http://127.0.0.1:{free_port()}/v1")
    profiles = tmp / "profiles.yaml"
    profiles.write_text(
        yaml.safe_dump(
            {
                "profiles": [
                    {
                        "name": "down_chat",
                        "enable_router": False,
                        "executor": "worker",
                        "agent": {"model_card": "down"},
                    }
                ]
            }
        )
    )
    s = make_suite(
        tmp,
        f"f{uuid.uuid4().hex[:10]}_",
        AGENTMESH_MODEL_PROVIDER="openai",
        AGENTMESH_MODEL_CARD="fault",
        AGENTMESH_MODEL_CARDS_DIR=str(cards),
        AGENTMESH_PROFILES_FILE=str(profiles),
        FAULT_MODEL_KEY=KEY,
    )
    try:
        s.start(timeout=90)
    except RuntimeError:
        s.stop()
        _dump_logs(tmp / "logs")
        fake.stop()
        raise
    yield s, fake.fake, tmp / "logs"
    s.stop()
    fake.stop()


def _chat(suite: Suite, owner: str, thread: str, text: str, **extra: Any) -> list[dict[str, Any]]:
    resp = httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=run_body(thread, f"r-{uuid.uuid4().hex[:8]}", text, **extra),
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    return parse_sse(resp.content)


def _history(suite: Suite, owner: str, thread: str) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/threads/{thread}/history",
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return list(resp.json()["messages"])


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


TEXT = recording("text.sse")  # "Hello! How can I help?"
FAULTS = {
    "unknown-model": (
        error(
            404,
            "The model `fault-model` does not exist",
            code="model_not_found",
            type="invalid_request_error",
        ),
        "MODEL_INVALID_REQUEST",
    ),
    "wrong-key": (
        error(
            401, "Incorrect API key provided", code="invalid_api_key", type="invalid_request_error"
        ),
        "MODEL_AUTHENTICATION",
    ),
    "malformed-chunk": (
        events(_chunk({"content": "Hel"}), "{not json at all"),
        "MODEL_BAD_RESPONSE",
    ),
    "wrong-shape": (events(_chunk({"content": "Hel"}), {"choices": "nope"}), "MODEL_BAD_RESPONSE"),
    # llama-cpp-python's refusal of a malformed request: its pydantic errors as an HTTP 500.
    "validation-500": (
        error(
            500,
            "1 validation error:\n  {'type': 'string_type', 'msg': 'Input should be a valid "
            "string', 'input': None}",
            type="internal_server_error",
        ),
        "MODEL_INVALID_REQUEST",
    ),
    "closed-mid-stream": (
        Reply(body=TEXT.body, headers=TEXT.headers, cut_after=len(TEXT.body) // 2),
        "MODEL_STREAM_BROKEN",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_model_fault_is_its_own_run_error_and_the_thread_goes_on(
    faulty: tuple[Suite, FakeOpenAI, Path], fault: str
) -> None:
    suite, fake, _ = faulty
    reply, code = FAULTS[fault]
    owner, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    fake.replies[:] = [reply]
    failed = _chat(suite, owner, thread, PROMPT)
    assert failed[-1]["type"] == "RUN_ERROR" and failed[-1]["code"] == code, failed[-1]
    assert KEY not in json.dumps(failed) and "marmalade" not in failed[-1]["message"]
    streamed = "".join(e["delta"] for e in failed if e["type"] == "TEXT_MESSAGE_CONTENT")
    stored = _history(suite, owner, thread)
    # The input is kept; of the answer only what was streamed, as it was streamed.
    assert stored[0]["role"] == "user" and stored[0]["content"] == PROMPT
    replies = [m for m in stored[1:] if m["role"] == "assistant"]
    assert "".join(m.get("content") or "" for m in replies) == streamed
    assert len(stored) == 1 + (1 if streamed else 0)
    run_id = failed[0]["runId"]
    record = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/runs/{run_id}",
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=30,
    ).json()
    assert record["state"] == "failed" and record["error"]["code"] == code

    fake.replies[:] = [recording("text.sse")]
    again = _chat(suite, owner, thread, "Are you back?")
    assert again[-1]["type"] == "RUN_FINISHED", again[-1]
    assert "Hello! How can I help?" in "".join(
        e["delta"] for e in again if e["type"] == "TEXT_MESSAGE_CONTENT"
    )
    # The next run's model call saw the thread as stored, the failed turn's input included.
    sent = [m.get("content") for m in fake.requests[-1].body["messages"]]
    assert PROMPT in sent and sent[-1] == "Are you back?"


def test_a_card_pointing_at_a_server_that_is_down_is_unavailable(
    faulty: tuple[Suite, FakeOpenAI, Path],
) -> None:
    suite, _, _ = faulty
    owner, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    down = _chat(
        suite, owner, thread, PROMPT, forwardedProps={"agentmesh": {"profile": "down_chat"}}
    )
    assert down[-1]["type"] == "RUN_ERROR" and down[-1]["code"] == "MODEL_UNAVAILABLE", down[-1]
    assert "try again" in down[-1]["message"]
    assert [m["role"] for m in _history(suite, owner, thread)] == ["user"]


def test_tool_call_arguments_that_are_not_json_reach_the_model_as_an_error_result(
    faulty: tuple[Suite, FakeOpenAI, Path],
) -> None:
    """memory_search called with arguments that are not JSON: the call is not run, its
    result tells the model so, and the model's next turn answers (the run succeeds)."""
    suite, fake, _ = faulty
    owner, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "memory_search", "arguments": '{"query": tea'},
    }
    fake.replies[:] = [
        events(_chunk({"tool_calls": [call]}), _chunk({}, "tool_calls")),
        recording("text.sse"),
    ]
    done = _chat(suite, owner, thread, "What do I like to drink?")
    assert done[-1]["type"] == "RUN_FINISHED", done[-1]
    results = [e for e in done if e["type"] == "TOOL_CALL_RESULT"]
    assert [r["content"] for r in results] == ["error: the arguments are not valid JSON"]
    sent = fake.requests[-1].body["messages"]
    tool_messages = [m for m in sent if m["role"] == "tool"]
    assert tool_messages[0]["content"] == "error: the arguments are not valid JSON"
    # The call went back as every server takes it: content a string, arguments an object.
    [turn] = [m for m in sent if m.get("tool_calls")]
    assert turn["content"] == ""
    assert json.loads(turn["tool_calls"][0]["function"]["arguments"]) == {
        "invalid_arguments": '{"query": tea'
    }


def test_no_key_or_prompt_text_in_any_log(faulty: tuple[Suite, FakeOpenAI, Path]) -> None:
    suite, fake, logs = faulty
    fake.replies[:] = [FAULTS["wrong-key"][0]]
    _chat(suite, f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}", PROMPT)
    written = "".join(p.read_text(errors="replace") for p in logs.glob("*") if p.is_file())
    assert written  # the services did log
    assert KEY not in written
    assert "marmalade" not in written


def test_a_card_whose_endpoint_does_not_serve_its_model_stops_the_start(
    tmp_path: Path,
) -> None:
    """The orchestrator checks each card in use against its endpoint's GET /v1/models: a
    model the endpoint does not list is a start-up error naming the card and the model."""
    fake = ThreadedFake()
    listed = {"object": "list", "data": [{"id": "smollm2-135m-instruct", "object": "model"}]}
    fake.fake.replies[:] = [
        Reply(body=json.dumps(listed).encode(), headers={"Content-Type": "application/json"})
    ]
    cards = tmp_path / "cards"
    cards.mkdir()
    _card(cards / "fault.yaml", "fault", fake.fake.base_url)
    s = make_suite(
        tmp_path,
        f"f{uuid.uuid4().hex[:10]}_",
        AGENTMESH_MODEL_PROVIDER="openai",
        AGENTMESH_MODEL_CARD="fault",
        AGENTMESH_MODEL_CARDS_DIR=str(cards),
        FAULT_MODEL_KEY=KEY,
    )
    try:
        with pytest.raises(RuntimeError, match="exited with code"):
            s.start(timeout=60)
    finally:
        s.stop()
        fake.stop()
    logs = "".join(p.read_text() for p in (tmp_path / "logs").glob("*.log"))
    assert "model card fault: model: the endpoint" in logs
    assert "does not serve 'fault-model' (it serves: smollm2-135m-instruct)" in logs
    [asked] = fake.fake.requests
    assert asked.path == "/v1/models" and asked.headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in logs


def test_each_card_of_a_deployment_reaches_its_own_host_with_its_own_key(
    tmp_path: Path,
) -> None:
    """AGENTMESH_MODEL_BASE_URL set (as make run MODEL=local sets it): the deployment's card,
    which follows it, goes there keyless; a profile's hosted card goes to its own host with
    its own key, which the other host never sees (issue 32)."""
    local, hosted = ThreadedFake(), ThreadedFake()

    def listing(model: str) -> Any:
        def judge(request: Any) -> Reply | None:
            if not request.path.endswith("/models"):
                return None
            body = {"object": "list", "data": [{"id": model, "object": "model"}]}
            return Reply(
                body=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
            )

        return judge

    local.fake.judge, hosted.fake.judge = listing("local-model"), listing("hosted-model")
    cards = tmp_path / "cards"
    cards.mkdir()
    for name, extra in (
        ("localish", {"base_url": f"http://127.0.0.1:{free_port()}/v1",
                      "base_url_env": "AGENTMESH_MODEL_BASE_URL"}),
        ("hosted", {"base_url": hosted.fake.base_url, "api_key_env": "HOSTED_KEY"}),
    ):  # fmt: skip
        card = {"name": name, "provider": "openai", "model": f"{name.removesuffix('ish')}-model"}
        card.update(context_size=8000, output_size=500, max_retries=0, **extra)
        (cards / f"{name}.yaml").write_text(yaml.safe_dump(card))
    profiles = tmp_path / "profiles.yaml"
    hosted_chat = {"name": "hosted_chat", "enable_router": False, "executor": "worker"}
    hosted_chat["agent"] = {"model_card": "hosted"}
    profiles.write_text(yaml.safe_dump({"profiles": [hosted_chat]}))
    s = make_suite(
        tmp_path,
        f"f{uuid.uuid4().hex[:10]}_",
        AGENTMESH_MODEL_PROVIDER="openai",
        AGENTMESH_MODEL_CARD="localish",
        AGENTMESH_MODEL_CARDS_DIR=str(cards),
        AGENTMESH_MODEL_BASE_URL=local.fake.base_url,
        AGENTMESH_PROFILES_FILE=str(profiles),
        HOSTED_KEY=KEY,
    )
    try:
        s.start(timeout=90)
        owner = f"u-{uuid.uuid4().hex[:8]}"
        local.fake.replies[:] = [recording("text.sse")]
        hosted.fake.replies[:] = [recording("text.sse")]
        for extra in ({}, {"forwardedProps": {"agentmesh": {"profile": "hosted_chat"}}}):
            done = _chat(s, owner, f"t-{uuid.uuid4().hex[:8]}", "hello", **extra)
            assert done[-1]["type"] == "RUN_FINISHED", done[-1]
    finally:
        s.stop()
        local.stop()
        hosted.stop()
    [to_local] = [r for r in local.fake.requests if r.path.endswith("/chat/completions")]
    [to_hosted] = [r for r in hosted.fake.requests if r.path.endswith("/chat/completions")]
    assert to_local.body["model"] == "local-model" and to_hosted.body["model"] == "hosted-model"
    assert to_hosted.headers["authorization"] == f"Bearer {KEY}"
    assert all("authorization" not in r.headers for r in local.fake.requests)
