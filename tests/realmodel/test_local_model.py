"""The suite's real processes against the real local model (SmolLM2-135M on
llama-cpp-python): what holds for any competent model, never its wording."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as orch_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as orch_grpc
from agentmesh.type.v1 import message_pb2, run_event_pb2

from services.launcher import LOCAL_CONTEXT, LocalModelServer, Suite
from shared.identity import call_metadata
from shared.messages import msg_to_pb, user
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, profile_to_pb
from tests.e2e.conftest import run_body
from tests.realmodel.conftest import assert_well_formed, auth, chat, history, new_id, streamed_text

pytestmark = pytest.mark.realmodel

# About 1,500 tokens by agentmesh's estimate (1,100 or so by SmolLM2's tokenizer): two of
# these outgrow the model's 2,048-token window.
LONG = " ".join(
    f"Note {i}: the harbour office opens at nine and the ferry leaves at ten." for i in range(64)
)


def reply_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "assistant" and m.get("content")]


def test_a_chat_run_streams_real_text_stores_it_and_reports_usage(suite: Suite) -> None:
    owner, thread = new_id("ann"), new_id("t")
    start = time.perf_counter()
    events = chat(suite, owner, thread, "Say hello in one short sentence.")
    elapsed = time.perf_counter() - start
    assert_well_formed(events)
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["outcome"] == {"type": "success"}, (
        finished
    )
    text = streamed_text(events)
    assert text.strip()
    [usage] = finished["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    assert usage["inputTokens"] + usage["outputTokens"] <= LOCAL_CONTEXT
    # llama-cpp-python reports no usage when streaming: agentmesh counted it, and says so,
    # on RUN_FINISHED and on the run record alike.
    assert usage["estimated"] is True
    url = f"{suite.gateway_url}/api/v1/agent/runs/{events[0]['runId']}"
    record = httpx.get(url, headers=auth(owner), timeout=30).json()
    assert record["usage"] == finished["usage"]
    # With one tool (memory_search) the router has nothing to decide: its step is immediate.
    assert [e["stepName"] for e in events if e["type"] == "STEP_STARTED"] == ["router", "worker"]
    # Stored as streamed (one reply, or the text of each turn if the model used its tool).
    stored = reply_messages(history(suite, owner, thread))
    assert "".join(m["content"] for m in stored) == text
    print(f"chat run: {elapsed:.2f}s end to end")


def test_a_thread_grown_past_the_context_window_keeps_answering(suite: Suite) -> None:
    owner, thread = new_id("bob"), new_id("t")
    for n in range(3):
        events = chat(suite, owner, thread, f"Part {n}. {LONG}")
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    events = chat(suite, owner, thread, "When does the ferry leave?")
    assert_well_formed(events)
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED", finished
    [usage] = finished["usage"]
    # What went to the model fit its window (the thread holds far more than 2,048 tokens).
    assert usage["inputTokens"] + usage["outputTokens"] <= LOCAL_CONTEXT
    assert streamed_text(events).strip()
    said = [m for m in history(suite, owner, thread) if m["role"] == "user"]
    assert len(said) == 4


def numbers(count: int, seed: int = 1) -> str:
    """`count` numbers of up to four digits. SmolLM2's tokenizer splits digits one by one, so
    agentmesh's estimate (three ASCII characters a token) counts about a third of their real
    tokens (measured: 484 real tokens for an estimate of 162): a budget by the estimate lets
    them through to a server that finds them longer than its window."""
    return " ".join(str((i + seed) * 7919 % 10000) for i in range(count))


def test_a_prompt_longer_than_the_window_is_a_final_error_and_the_thread_goes_on(
    suite: Suite,
) -> None:
    owner, thread = new_id("ola"), new_id("t")
    # About 2,300 real tokens (an estimate of 760): longer than the 2,048 of the window.
    events = chat(suite, owner, thread, f"Add up these numbers: {numbers(470)}")
    assert_well_formed(events)
    last = events[-1]
    if last["type"] == "RUN_ERROR":
        # Said once and for all (never "try again shortly": a retry sends the same prompt).
        assert last["code"] == "MODEL_CONTEXT_OVERFLOW", last
        assert "try again" not in last["message"], last
    else:
        # Or it was made to fit (compacted): a reply all the same.
        assert last["outcome"] == {"type": "success"} and streamed_text(events).strip(), last
    follow = chat(suite, owner, thread, "Say hello in one short sentence.")
    assert_well_formed(follow)
    assert follow[-1]["type"] == "RUN_FINISHED", follow[-1]
    assert streamed_text(follow).strip()


def test_a_thread_whose_real_tokens_outgrow_the_window_is_compacted_and_answers(
    suite: Suite,
) -> None:
    owner, thread = new_id("pat"), new_id("t")
    # Each about 1,100 real tokens (an estimate of 400): two of them are longer than the
    # window. Counted by the model's tokenizer, the second run leaves the first message out
    # before calling; counted by the estimate (which fits them both), the server refuses the
    # turn and the worker fits it again into half the budget. Either way: compacted, answered.
    for n in range(2):
        events = chat(suite, owner, thread, f"Part {n}, numbers: {numbers(230, seed=n * 1000)}")
        assert_well_formed(events)
        assert events[-1]["type"] == "RUN_FINISHED", (n, events[-1])
        assert events[-1]["outcome"] == {"type": "success"}, (n, events[-1])
        assert streamed_text(events).strip()
    compacted = [
        json.loads(line)
        for line in suite.log_path("executor").read_text().splitlines()
        if "left out the oldest messages" in line or "fitting into half the budget" in line
    ]
    assert events[0]["runId"] in {c.get("run_id") for c in compacted}


def test_a_run_cancelled_mid_stream_keeps_its_partial_reply_and_the_thread_goes_on(
    suite: Suite,
) -> None:
    owner, thread, run_id = new_id("cat"), new_id("t"), new_id("r")
    body = run_body(
        thread, run_id, "Write a long story about a dragon who learns to cook, in many paragraphs."
    )
    events: list[dict[str, Any]] = []
    with httpx.stream(
        "POST",
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=body,
        headers=auth(owner),
        timeout=300,
    ) as resp:
        assert resp.status_code == 200
        cancelled = False
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(json.loads(line[6:]))
            if events[-1]["type"] == "TEXT_MESSAGE_CONTENT" and not cancelled:
                cancelled = True
                answer = httpx.post(
                    f"{suite.gateway_url}/api/v1/agent/runs/{run_id}:cancel",
                    headers=auth(owner),
                    timeout=30,
                )
                assert answer.status_code == 200, answer.text
    assert_well_formed(events)
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {
        "type": "cancelled"
    }, events[-1]
    record = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/runs/{run_id}", headers=auth(owner), timeout=30
    ).json()
    assert record["state"] == "cancelled"
    partial = reply_messages(history(suite, owner, thread))
    assert partial and partial[-1]["content"].strip()
    sent, kept = streamed_text(events), "".join(m["content"] for m in partial)
    assert sent.startswith(kept) or kept.startswith(sent)
    follow = chat(suite, owner, thread, "Thanks. Say goodbye.")
    assert follow[-1]["type"] == "RUN_FINISHED" and streamed_text(follow).strip()


def test_a_client_tool_call_if_the_model_makes_one_is_streamed_and_ends_the_run_as_an_interrupt(
    suite: Suite,
) -> None:
    owner, thread = new_id("dan"), new_id("t")
    tool = {
        "name": "get_weather",
        "description": "Get the current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
    events = chat(
        suite,
        owner,
        thread,
        "What is the weather in Paris? Use the get_weather tool.",
        tools=[tool],
    )
    assert_well_formed(events)
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED", finished
    starts = [e for e in events if e["type"] == "TOOL_CALL_START"]
    if not starts:
        # The model answered in text instead: a plain, stored reply.
        assert finished["outcome"] == {"type": "success"} and streamed_text(events).strip()
        return
    ids = [e["toolCallId"] for e in starts]
    assert all(e["toolCallName"] == "get_weather" for e in starts)
    assert finished["outcome"]["type"] == "interrupt"
    assert [i["toolCallId"] for i in finished["outcome"]["interrupts"]] == ids
    for call_id in ids:
        kinds = [e["type"] for e in events if e.get("toolCallId") == call_id]
        assert kinds[0] == "TOOL_CALL_START" and kinds[-1] == "TOOL_CALL_END"
    stored = [m for m in history(suite, owner, thread) if m.get("toolCalls")]
    assert [c["id"] for m in stored for c in m["toolCalls"]] == ids


def automation_run(suite: Suite, owner: str) -> tuple[str, list[run_event_pb2.RunEvent]]:
    """The owner's memory job, as the scheduler's trigger starts it."""
    run_id = new_id("job")
    request = orch_pb.StartRunRequest(
        thread_id=f"job-memory-{owner}",
        run_id=run_id,
        messages=[msg_to_pb(user("Extract the user's durable memories.", id=f"in-{run_id}"))],
        origin=message_pb2.RUNTIME_MODE_AUTOMATION,
        profile=profile_to_pb(AUTOMATION_MEMORY_DEFAULT),
        declared_tools=["memory_write", "memory_forget"],
        time_zone="Asia/Shanghai",
    )
    with grpc.insecure_channel(suite.address("orchestrator")) as ch:
        stub = orch_grpc.OrchestratorServiceStub(ch)
        events = [
            r.event for r in stub.StartRun(request, metadata=call_metadata(owner), timeout=240)
        ]
    return run_id, events


def test_a_memory_job_extracts_a_fact_told_in_chat(suite: Suite) -> None:
    """smollm2-local extracts by structured output (a JSON-schema grammar): the fact told
    in chat becomes a memory through memory_write, and the watermark moves past it."""
    owner = new_id("lin")
    chat(suite, owner, new_id("t"), "My favourite colour is green. Please remember that.")
    run_id, events = automation_run(suite, owner)
    last = events[-1]
    said = "".join(
        e.text_message_content.delta
        for e in events
        if e.WhichOneof("payload") == "text_message_content"
    )
    assert last.WhichOneof("payload") == "run_finished", (last.run_error.message, said)
    resp = httpx.get(f"{suite.gateway_url}/api/v1/memories", headers=auth(owner), timeout=30)
    saved = [m["content"] for m in resp.json()["memories"]]
    # Whatever the wording, the memory is about the colour the user named.
    assert any("green" in content.lower() for content in saved), saved
    started = [
        e.tool_call_start.tool_call_name
        for e in events
        if e.WhichOneof("payload") == "tool_call_start"
    ]
    assert "memory_write" in started
    record = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/runs/{run_id}", headers=auth(owner), timeout=30
    ).json()
    assert record["state"] == "succeeded" and record["usage"][0]["estimated"] is True
    # The watermark moved past those messages: the next run has nothing to read.
    _, again = automation_run(suite, owner)
    again_text = "".join(
        e.text_message_content.delta
        for e in again
        if e.WhichOneof("payload") == "text_message_content"
    )
    assert again[-1].WhichOneof("payload") == "run_finished" and "No new messages" in again_text


@pytest.fixture
def restarted(model_server: LocalModelServer) -> Iterator[LocalModelServer]:
    """The shared model server, started again after the test (whatever the test did to it)."""
    yield model_server
    if not model_server.is_ready():
        model_server.stop()
        model_server.start(timeout=180)


def test_the_model_server_killed_mid_stream_is_a_classified_error_and_the_thread_stays_usable(
    suite: Suite, restarted: LocalModelServer
) -> None:
    owner, thread, run_id = new_id("eve"), new_id("t"), new_id("r")
    body = run_body(
        thread, run_id, "Write a long story about a lighthouse keeper, in many paragraphs."
    )
    events: list[dict[str, Any]] = []
    with httpx.stream(
        "POST",
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=body,
        headers=auth(owner),
        timeout=300,
    ) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if events[-1]["type"] == "TEXT_MESSAGE_CONTENT" and restarted.proc.poll() is None:
                    restarted.kill()
    assert_well_formed(events)
    assert events[-1]["type"] == "RUN_ERROR", events[-1]
    assert events[-1]["code"] == "MODEL_STREAM_BROKEN" and "try again" in events[-1]["message"]
    # What it streamed before is kept as streamed (finishedReason "error"), nothing more.
    kept = "".join(m["content"] for m in reply_messages(history(suite, owner, thread)))
    assert streamed_text(events).startswith(kept)
    record = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/runs/{run_id}", headers=auth(owner), timeout=30
    )
    assert (
        record.json()["state"] == "failed"
        and record.json()["error"]["code"] == "MODEL_STREAM_BROKEN"
    )

    # While it is down: a clear, transient error, quickly (the card's connect timeout).
    down = chat(suite, owner, thread, "Are you there?")
    assert down[-1]["type"] == "RUN_ERROR" and down[-1]["code"] == "MODEL_UNAVAILABLE", down[-1]
    assert "try again" in down[-1]["message"]

    restarted.start(timeout=180)
    back = chat(suite, owner, thread, "Say hello.")
    assert back[-1]["type"] == "RUN_FINISHED" and streamed_text(back).strip()


def stream_run(
    suite: Suite, owner: str, body: dict[str, Any], on_first_text: Any
) -> list[dict[str, Any]]:
    """A chat run's events, calling `on_first_text()` once its first text arrives."""
    events: list[dict[str, Any]] = []
    with httpx.stream(
        "POST",
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=body,
        headers=auth(owner),
        timeout=300,
    ) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if events[-1]["type"] == "TEXT_MESSAGE_CONTENT" and on_first_text is not None:
                    on_first_text()
                    on_first_text = None
    return events


def assert_usage_reported(suite: Suite, owner: str, last: dict[str, Any]) -> None:
    """The run called the model: its terminal event and its record report what it used,
    counted (estimated) where the server said nothing."""
    [usage] = last.get("usage") or [{}]
    assert usage.get("inputTokens", 0) > 0 and usage.get("outputTokens", 0) > 0, last
    assert usage["estimated"] is True
    run_id = last.get("runId") or ""
    record = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/runs/{run_id}", headers=auth(owner), timeout=30
    ).json()
    assert record["usage"] == last["usage"], record


# Issue 32 item 5: a cancelled run and one whose model stream broke report what they used.
def test_a_run_cancelled_mid_stream_reports_what_it_used(suite: Suite) -> None:
    owner, thread, run_id = new_id("quin"), new_id("t"), new_id("r")
    body = run_body(thread, run_id, "Write a long story about a fox who builds boats.")

    def cancel() -> None:
        url = f"{suite.gateway_url}/api/v1/agent/runs/{run_id}:cancel"
        assert httpx.post(url, headers=auth(owner), timeout=30).status_code == 200

    events = stream_run(suite, owner, body, cancel)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    assert events[-1]["outcome"] == {"type": "cancelled"}, events[-1]
    assert_usage_reported(suite, owner, {"runId": run_id, **events[-1]})


def test_a_run_whose_model_server_died_mid_stream_reports_what_it_used(
    suite: Suite, restarted: LocalModelServer
) -> None:
    owner, thread, run_id = new_id("rae"), new_id("t"), new_id("r")
    body = run_body(thread, run_id, "Write a long story about a bridge builder.")
    events = stream_run(suite, owner, body, restarted.kill)
    assert events[-1]["type"] == "RUN_ERROR", events[-1]
    assert events[-1]["code"] == "MODEL_STREAM_BROKEN", events[-1]
    assert_usage_reported(suite, owner, {"runId": run_id, **events[-1]})
