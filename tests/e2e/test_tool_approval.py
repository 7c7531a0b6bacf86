"""Approval of tool calls through the whole suite: a tool that requires approval stops the
run with an AG-UI interrupt (the pending call and its arguments); the thread's next run
answers it through RunAgentInput `resume` (approve / edit / deny); a bad answer is refused
with 400 naming the field and nothing stored; an approval left unanswered expires."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from services.launcher import Suite
from tests.e2e.conftest import parse_sse, run_body, token
from tests.tools.conftest import notes_stdio
from tests.tools.suite import PROFILE, outside_tools_suite

TTL = 4.0


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    servers = [notes_stdio(requires_approval=["notes.add_note"])]
    env = {"AGENTMESH_APPROVAL_TTL_SECONDS": str(TTL)}
    with outside_tools_suite(tmp_path_factory.mktemp("approval"), servers, **env) as s:
        yield s


def new(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


def post(suite: Suite, owner: str, thread: str, text: str, **extra: Any) -> httpx.Response:
    body = run_body(
        thread, new("r"), text, forwardedProps={"agentmesh": {"profile": PROFILE}}, **extra
    )
    return httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=body,
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=120,
    )


def events(resp: httpx.Response) -> list[dict[str, Any]]:
    assert resp.status_code == 200, resp.text
    return parse_sse(resp.content)


def history(suite: Suite, owner: str, thread: str) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/threads/{thread}/history",
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    # JSON of the response.
    return resp.json()["messages"]  # type: ignore[no-any-return]


def ask(suite: Suite, owner: str, thread: str, note: str) -> dict[str, Any]:
    """A run that calls notes.add_note: it ends waiting for approval; the interrupt."""
    got = events(
        post(suite, owner, thread, f'use the notes.add_note tool with {{"text": "{note}"}}')
    )
    end = got[-1]
    assert end["type"] == "RUN_FINISHED" and end["outcome"]["type"] == "interrupt", end
    [interrupt] = end["outcome"]["interrupts"]
    assert not [e for e in got if e["type"] == "TOOL_CALL_RESULT"]
    # A parsed SSE event: JSON of any shape.
    return interrupt  # type: ignore[no-any-return]


def notes(suite: Suite, owner: str) -> str:
    got = events(post(suite, owner, new("t"), "use the notes.list_notes tool"))
    [result] = [e for e in got if e["type"] == "TOOL_CALL_RESULT"]
    return str(result["content"])


def test_a_call_needing_approval_ends_the_run_with_an_interrupt_naming_the_call(
    suite: Suite,
) -> None:
    owner = new("ann")
    interrupt = ask(suite, owner, new("t"), "call mom")
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["id"] == interrupt["toolCallId"]
    assert interrupt["metadata"]["toolName"] == "notes.add_note"
    assert json.loads(interrupt["metadata"]["arguments"]) == {"text": "call mom"}
    assert interrupt["expiresAt"].endswith("Z")
    assert notes(suite, owner) == "no notes"  # nothing ran


def test_approve_runs_the_call_in_the_next_run_and_keeps_who_decided(suite: Suite) -> None:
    owner, thread = new("bea"), new("t")
    interrupt = ask(suite, owner, thread, "buy milk")
    resume = [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "approve"}}
    ]
    got = events(post(suite, owner, thread, "approved", resume=resume))
    assert got[-1]["type"] == "RUN_FINISHED" and got[-1]["outcome"]["type"] == "success", got[-1]
    [result] = [e for e in got if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == interrupt["id"] and result["content"] == "saved note 1"
    assert notes(suite, owner) == "buy milk"
    stored = [m for m in history(suite, owner, thread) if m.get("toolCallId") == interrupt["id"]]
    assert stored and stored[0]["content"] == "saved note 1"
    [decision] = stored[0]["metadata"]["approvals"]
    assert decision["decision"] == "approve" and decision["decidedBy"] == owner
    assert decision["toolCallId"] == interrupt["id"] and len(decision["argumentsSha256"]) == 64


def test_edit_runs_the_call_with_the_edited_arguments(suite: Suite) -> None:
    owner, thread = new("cy"), new("t")
    interrupt = ask(suite, owner, thread, "typo")
    payload = {"decision": "edit", "arguments": {"text": "fixed"}}
    got = events(
        post(
            suite,
            owner,
            thread,
            "edited",
            resume=[{"interruptId": interrupt["id"], "status": "resolved", "payload": payload}],
        )
    )
    assert [e["content"] for e in got if e["type"] == "TOOL_CALL_RESULT"] == ["saved note 1"]
    assert notes(suite, owner) == "fixed"


@pytest.mark.parametrize(
    ("answer", "decision", "said", "reason"),
    [
        ({"status": "cancelled"}, "cancel", "cancelled", "cancelled_by_user"),
        (
            {"status": "resolved", "payload": {"decision": "deny"}},
            "deny",
            "denied",
            "denied_by_user",
        ),
    ],
)
def test_deny_or_cancel_never_runs_the_call_and_is_recorded_as_it_was_given(
    suite: Suite, answer: dict[str, Any], decision: str, said: str, reason: str
) -> None:
    owner, thread = new("dee"), new("t")
    interrupt = ask(suite, owner, thread, "no")
    got = events(
        post(suite, owner, thread, "no thanks", resume=[{"interruptId": interrupt["id"], **answer}])
    )
    [result] = [e for e in got if e["type"] == "TOOL_CALL_RESULT"]
    assert said in result["content"]
    assert notes(suite, owner) == "no notes"
    assert got[-1]["type"] == "RUN_FINISHED", got[-1]
    # A cancelled interrupt is kept as a cancel, not as a person's "no".
    stored = [m for m in history(suite, owner, thread) if m.get("toolCallId") == interrupt["id"]]
    [kept] = stored[0]["metadata"]["approvals"]
    assert kept["decision"] == decision and kept["decidedBy"] == owner
    # ... and in the audit's tool denials, beside the policy's.
    [denial] = denials(suite, owner, thread)
    assert denial["toolCallId"] == interrupt["id"] and denial["toolName"] == "notes.add_note"
    assert denial["reason"] == reason and len(denial["argumentsSha256"]) == 64


def denials(suite: Suite, owner: str, thread: str) -> list[dict[str, Any]]:
    """The audit's toolDenials of the thread: every decision that kept a call from running."""
    audit = httpx.get(
        f"{suite.gateway_url}/api/v1/admin/audit",
        params={"owner_id": owner, "thread_id": thread},
        headers={"Authorization": f"Bearer {token('auditor', admin=True)}"},
        timeout=30,
    )
    assert audit.status_code == 200, audit.text
    # JSON of the response.
    return audit.json()["toolDenials"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        (
            {"interruptId": "nope", "status": "resolved", "payload": {"decision": "approve"}},
            "resume[0].interruptId",
        ),
        ({"status": "resolved"}, "resume[0].interruptId"),
        ({"interruptId": "x", "status": "maybe"}, "resume[0].status"),
        ({"interruptId": "x", "status": "resolved"}, "resume[0].payload"),
        (
            {"interruptId": "x", "status": "resolved", "payload": {"decision": "yes"}},
            "resume[0].payload.decision",
        ),
        (
            {"interruptId": "x", "status": "resolved", "payload": {"decision": "edit"}},
            "resume[0].payload.arguments",
        ),
        (
            {"interruptId": "x", "status": "resolved", "payload": {"decision": "approve", "x": 1}},
            "resume[0].payload.x",
        ),
        ("approve", "resume[0]"),
        # By JSON type, nesting and size (tests/gateway/test_run_input.py has every field).
        ({"interruptId": 7, "status": "cancelled"}, "resume[0].interruptId"),
        ({"interruptId": "x", "status": ["resolved"]}, "resume[0].status"),
        ({"interruptId": "x", "status": "resolved", "payload": ["approve"]}, "resume[0].payload"),
        (
            {"interruptId": "x", "status": "resolved", "payload": {"decision": {"k": "approve"}}},
            "resume[0].payload.decision",
        ),
        (
            {
                "interruptId": "x",
                "status": "resolved",
                "payload": {
                    "decision": "edit",
                    "arguments": {
                        "a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
                    },
                },
            },
            "resume[0].payload.arguments",
        ),
        (
            {
                "interruptId": "x",
                "status": "resolved",
                "payload": {"decision": "edit", "arguments": {"text": "x" * 200_000}},
            },
            "resume[0].payload.arguments",
        ),
        ([{"interruptId": "x", "status": "cancelled"}] * 2, "resume[1].interruptId"),
    ],
)
def test_a_bad_resume_is_refused_naming_the_field_and_nothing_is_stored(
    suite: Suite, entry: Any, field: str
) -> None:
    owner, thread = new("eve"), new("t")
    interrupt = ask(suite, owner, thread, "keep")
    entries = entry if isinstance(entry, list) else [entry]
    entries = [
        {**e, "interruptId": interrupt["id"]}
        if isinstance(e, dict) and e.get("interruptId") == "x"
        else e
        for e in entries
    ]
    before = history(suite, owner, thread)
    resp = post(suite, owner, thread, "answer", resume=entries)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["details"][0]["field"].startswith(field), resp.text
    assert history(suite, owner, thread) == before
    assert _threads(suite, owner)[0]["id"] == thread and len(_threads(suite, owner)) == 1
    assert notes(suite, owner) == "no notes"


def test_another_owner_cannot_answer_an_approval(suite: Suite) -> None:
    owner, thread = new("fay"), new("t")
    interrupt = ask(suite, owner, thread, "mine")
    resume = [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "approve"}}
    ]
    resp = post(suite, new("mallory"), thread, "approved", resume=resume)
    assert resp.status_code in (400, 404), resp.text
    assert notes(suite, owner) == "no notes"


def test_an_unanswered_approval_expires_and_is_recorded_denied(suite: Suite) -> None:
    owner, thread = new("gus"), new("t")
    interrupt = ask(suite, owner, thread, "late")
    time.sleep(TTL + 0.5)
    resume = [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "approve"}}
    ]
    late = post(suite, owner, thread, "approved", resume=resume)
    assert (
        late.status_code == 400
        and late.json()["error"]["details"][0]["field"] == "resume[0].interruptId"
    )
    assert "expired" in late.text
    got = events(post(suite, owner, thread, "anything else?"))
    [result] = [e for e in got if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == interrupt["id"] and "not executed" in result["content"]
    assert notes(suite, owner) == "no notes"
    [denial] = denials(suite, owner, thread)
    assert denial["toolCallId"] == interrupt["id"] and denial["reason"] == "approval_expired"


def _threads(suite: Suite, owner: str) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/threads",
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    # JSON of the response.
    return resp.json()["threads"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("tools", "field"),
    [
        ([{"name": "notes.add_note"}], "tools[0].name"),
        ([{"name": "lookup"}, {"name": "memory_search"}], "tools[1].name"),
        ([{"name": "notes.not_listed_by_the_server"}], "tools[0].name"),
        ([{"name": "lookup"}, {"name": "lookup"}], "tools[1].name"),
    ],
    ids=["an outside tool", "a built-in", "the namespace of a tool server", "twice"],
)
def test_a_client_tool_named_like_a_server_tool_is_400_before_anything_is_stored(
    suite: Suite, tools: list[dict[str, Any]], field: str
) -> None:
    owner, thread = new("hal"), new("t")
    resp = post(suite, owner, thread, "use my tool", tools=tools)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert error["details"][0]["field"] == field, resp.text
    assert _threads(suite, owner) == []


def test_concurrent_resumes_of_one_interrupt_are_answered_once(suite: Suite) -> None:
    owner, thread = new("ida"), new("t")
    interrupt = ask(suite, owner, thread, "only once")
    before = len(history(suite, owner, thread))
    resume = [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "approve"}}
    ]
    n = 6
    barrier = threading.Barrier(n)

    def answer(i: int) -> httpx.Response:
        barrier.wait()
        return post(suite, owner, thread, f"approved {i}", resume=resume)

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(answer, range(n)))
    codes = sorted(r.status_code for r in answers)
    assert codes == [200] + [400] * (n - 1), [r.text[:300] for r in answers]
    for refused in (r for r in answers if r.status_code == 400):
        assert refused.json()["error"]["details"][0]["field"] == "resume[0].interruptId"
    [ran] = [r for r in answers if r.status_code == 200]
    assert [e["content"] for e in events(ran) if e["type"] == "TOOL_CALL_RESULT"] == [
        "saved note 1"
    ]
    assert notes(suite, owner) == "only once"
    stored = history(suite, owner, thread)
    # One run's input, the call's result and its reply: nothing of the refused ones.
    inputs = [m for m in stored[before:] if m["role"] == "user"]
    assert len(inputs) == 1, stored[before:]


def test_a_resume_posted_while_another_run_is_in_progress_is_400_and_stores_nothing(
    suite: Suite,
) -> None:
    """The run in progress records the thread's waiting approval `unanswered` when it ends;
    a resume queued behind it was 200 and its answer silently dropped."""
    owner, thread = new("jo"), new("t")
    interrupt = ask(suite, owner, thread, "later")
    resume = [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "approve"}}
    ]
    said = 'use the notes.slow tool with {"seconds": 4}'
    body = run_body(thread, new("r"), said, forwardedProps={"agentmesh": {"profile": PROFILE}})
    busy: list[dict[str, Any]] = []
    with httpx.stream(
        "POST",
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=body,
        headers={"Authorization": f"Bearer {token(owner)}"},
        timeout=120,
    ) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                busy.append(json.loads(line[len("data: ") :]))
                if busy[-1]["type"] == "TOOL_CALL_START":
                    break  # admitted, and its slow call is under way
        refused = post(suite, owner, thread, "approved", resume=resume)
        busy.extend(json.loads(x[len("data: ") :]) for x in lines if x.startswith("data: "))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["details"][0]["field"] == "resume[0].interruptId"
    assert busy[-1]["type"] == "RUN_FINISHED", busy[-1]
    stored = history(suite, owner, thread)
    assert "approved" not in [m.get("content") for m in stored if m["role"] == "user"]
    [settled] = [m for m in stored if m.get("toolCallId") == interrupt["id"]]
    assert settled["metadata"]["approvals"][0]["decision"] == "unanswered"
    [denial] = denials(suite, owner, thread)
    assert denial["toolCallId"] == interrupt["id"] and denial["reason"] == "approval_unanswered"
    assert notes(suite, owner) == "no notes"
