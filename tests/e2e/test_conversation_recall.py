"""Conversation recall end to end, on the real processes and the scripted model: something said
once in an old thread and never extracted as a memory is found from a new thread, by the
recall source of a profile with memory.conversation and by the conversation_search tool;
never by another owner, never after its thread is deleted, never from an automation input."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
import yaml
from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.history.v1 import history_service_pb2_grpc as history_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as orch_grpc
from agentmesh.type.v1 import message_pb2

from services.launcher import Suite
from shared.identity import call_metadata
from shared.profiles import CHAT_DEFAULT, profile_to_pb
from tests.conftest import USES_POSTGRES, drop_schemas
from tests.e2e.conftest import _dump_logs, make_suite, parse_sse, run_body, serves_runs
from tests.e2e.test_data_lifecycle import _wait_deletion
from tests.e2e.test_memory_agent import _auth, _owner, memories
from tests.e2e.test_memory_recall import audit, job_run

PROFILE = "chat_recall"
LOCKER = "By the way, my locker code at the gym is 4711"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("recall")
    profiles = tmp / "profiles.yaml"
    profiles.write_text(
        yaml.safe_dump(
            {
                "profiles": [
                    {
                        "name": PROFILE,
                        "enable_router": False,
                        "executor": "worker",
                        "tool_policy": {"allowlist": ["conversation_search"]},
                        "memory": {"mode": "recall", "conversation": True},
                    }
                ]
            }
        )
    )
    prefix = f"c{uuid.uuid4().hex[:10]}_"
    s = make_suite(tmp, prefix, AGENTMESH_PROFILES_FILE=str(profiles))
    try:
        s.start(timeout=90)
        serves_runs(s.gateway_url, in_a_row=1, within=60)
    except RuntimeError:
        s.stop()
        _dump_logs(tmp / "logs")
        raise
    yield s
    s.stop()
    if USES_POSTGRES:
        asyncio.run(drop_schemas(prefix))


@pytest.fixture(scope="module")
def orchestrator(suite: Suite) -> Iterator[orch_grpc.OrchestratorServiceStub]:
    with grpc.insecure_channel(suite.address("orchestrator")) as ch:
        yield orch_grpc.OrchestratorServiceStub(ch)


def chat(suite: Suite, owner: str, thread: str, text: str) -> tuple[str, list[dict[str, Any]]]:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    body = run_body(thread, run_id, text, forwardedProps={"agentmesh": {"profile": PROFILE}})
    resp = httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs", json=body, headers=_auth(owner), timeout=30
    )
    assert resp.status_code == 200, resp.text
    events = parse_sse(resp.content)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return run_id, events


def recalled(suite: Suite, owner: str, thread: str, run_id: str) -> list[dict[str, Any]]:
    """The chat messages run `run_id` recalled (its memory_recall record's conversation
    items), with the record's text."""
    records = [
        m
        for m in audit(suite, owner, thread)
        if m.get("runId") == run_id and m.get("kind") == "memory_recall"
    ]
    if not records:
        return []
    [record] = records
    items = record["metadata"]["memoryRecall"]
    return [i | {"text": record["content"]} for i in items if i.get("source") == "conversation"]


def test_something_said_once_and_never_extracted_is_recalled_from_a_new_thread(
    suite: Suite,
) -> None:
    owner = _owner("ada")
    old = f"old-{owner}"
    told_run, _ = chat(suite, owner, old, LOCKER)
    assert memories(suite, owner) == {}, "nothing was extracted"

    new = f"new-{owner}"
    run_id, _ = chat(suite, owner, new, "What is my locker code at the gym?")
    [item] = [i for i in recalled(suite, owner, new, run_id) if i["id"] == f"m-{told_run}"]
    assert item["threadId"] == old and 0 < item["score"] <= 1
    assert "my locker code at the gym is 4711" in item["text"]
    # The run record keeps the policy it ran with.
    record = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/runs/{run_id}", headers=_auth(owner), timeout=10
    ).json()
    assert record["profile"]["memory"]["conversation"] is True

    # Another owner asking the same finds nothing of it.
    other = _owner("bea")
    theirs, _ = chat(suite, other, f"new-{other}", "What is my locker code at the gym?")
    assert recalled(suite, other, f"new-{other}", theirs) == []


def test_the_conversation_search_tool_finds_it(suite: Suite) -> None:
    owner = _owner("cal")
    chat(suite, owner, f"old-{owner}", LOCKER)
    ask = 'use the conversation_search tool with {"query": "locker code gym"}'
    _, events = chat(suite, owner, f"new-{owner}", ask)
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    found = json.loads(result["content"])
    assert any("4711" in f["text"] and f["threadId"] == f"old-{owner}" for f in found), found


def test_a_deleted_thread_is_never_recalled(suite: Suite) -> None:
    owner = _owner("dex")
    old = f"old-{owner}"
    chat(suite, owner, old, LOCKER)
    resp = httpx.delete(
        f"{suite.gateway_url}/api/v1/agent/threads/{old}", headers=_auth(owner), timeout=10
    )
    assert resp.status_code == 200, resp.text
    new = f"new-{owner}"
    run_id, _ = chat(suite, owner, new, "What is my locker code at the gym?")
    assert recalled(suite, owner, new, run_id) == []


def test_a_deleted_owners_messages_are_never_recalled(suite: Suite) -> None:
    owner = _owner("fay")
    chat(suite, owner, f"old-{owner}", LOCKER)
    resp = httpx.delete(f"{suite.gateway_url}/api/v1/users/me", headers=_auth(owner), timeout=10)
    assert resp.status_code == 202, resp.text
    final = _wait_deletion(suite, owner, resp.json()["id"])
    assert final["state"] == "succeeded", final
    [memory] = [s for s in final["steps"] if s["service"] == "memory"]
    assert memory["deletedCounts"]["conversationMessages"] == 2  # the message and its reply
    # The same owner id, back later, recalls nothing of before.
    new = f"new-{owner}"
    run_id, _ = chat(suite, owner, new, "What is my locker code at the gym?")
    assert recalled(suite, owner, new, run_id) == []


def test_a_message_said_while_the_owner_deletion_waits_for_history_is_never_recalled(
    suite: Suite,
) -> None:
    owner = _owner("gus")
    md = call_metadata(owner)
    chat(suite, owner, f"busy-{owner}", "hello")
    with grpc.insecure_channel(suite.address("history")) as ch:
        history = history_grpc.HistoryServiceStub(ch)
        # A run in flight: the deletion's history step waits for it, after the memory step.
        history.BeginRun(
            history_pb.BeginRunRequest(
                thread_id=f"busy-{owner}",
                runtime_mode=message_pb2.RUNTIME_MODE_CHAT,
                run_id=f"live-{owner}",
                profile=profile_to_pb(CHAT_DEFAULT),
                lease_holder="test",
                lease_seconds=600,
            ),
            metadata=md,
            timeout=10,
        )
        resp = httpx.delete(f"{suite.gateway_url}/api/v1/users/me", headers=_auth(owner))
        assert resp.status_code == 202, resp.text
        steps = {s["service"]: s for s in resp.json()["steps"]}
        assert steps["memory"]["done"] and not steps["history"]["done"]
        # Said meanwhile, in a new thread: indexed after the memory step emptied the index.
        chat(suite, owner, f"late-{owner}", LOCKER)
        history.FinishRun(
            history_pb.FinishRunRequest(
                run_id=f"live-{owner}", state=history_pb.RUN_STATE_CANCELLED
            ),
            metadata=md,
            timeout=10,
        )
    # Asked again, the running deletion is driven on: history deletes the late thread.
    again = httpx.delete(f"{suite.gateway_url}/api/v1/users/me", headers=_auth(owner))
    final = _wait_deletion(suite, owner, again.json()["id"])
    assert final["state"] == "succeeded", final
    new = f"new-{owner}"
    run_id, _ = chat(suite, owner, new, "What is my locker code at the gym?")
    assert recalled(suite, owner, new, run_id) == []


def test_an_automation_input_is_never_recalled(
    suite: Suite, orchestrator: orch_grpc.OrchestratorServiceStub
) -> None:
    owner = _owner("eli")
    # A memory job's run: its input (the job's prompt) has mask 0, its reply mask 1.
    job_run(orchestrator, owner, f"job-{owner}", ("memory_write", "memory_forget"))
    new = f"new-{owner}"
    run_id, _ = chat(suite, owner, new, "Which durable memories were extracted from conversations?")
    assert recalled(suite, owner, new, run_id) == []
