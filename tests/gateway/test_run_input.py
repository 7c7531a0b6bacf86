"""POST /api/v1/agent/runs: what the gateway refuses (4xx naming the field) and what it sends
to the orchestrator."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from agentmesh.type.v1 import message_pb2
from google.protobuf import json_format

from shared.settings import Settings
from tests.gateway.conftest import Peers, run_body
from tests.gateway.sse_client import parse_frames, post_run

URL = "/api/v1/agent/runs"


def _user(content: Any, mid: str = "u1") -> dict[str, Any]:
    return {"id": mid, "role": "user", "content": content}


BAD_BODIES: dict[str, tuple[Any, str]] = {
    "not an object": ([1, 2], "body"),
    "missing threadId": ({"runId": "r", "messages": [_user("hi")]}, "threadId"),
    "missing runId": ({"threadId": "t", "messages": [_user("hi")]}, "runId"),
    "missing messages": ({"threadId": "t", "runId": "r"}, "messages"),
    "threadId not a string": ({"threadId": 7, "runId": "r", "messages": [_user("hi")]}, "threadId"),
    "empty messages": (run_body(messages=[]), "messages"),
    "message not an object": (run_body(messages=["hi"]), "messages[0]"),
    "last message not a user message": (
        run_body(messages=[_user("hi"), {"id": "a1", "role": "assistant", "content": "yo"}]),
        "messages[1].role",
    ),
    "empty content": (run_body(messages=[_user("")]), "messages[0].content"),
    "blank content": (run_body(messages=[_user("  \n ")]), "messages[0].content"),
    "empty parts": (run_body(messages=[_user([])]), "messages[0].content"),
    "only empty text parts": (
        run_body(messages=[_user([{"type": "text", "text": ""}])]),
        "messages[0].content",
    ),
    "missing content": (run_body(messages=[{"id": "u1", "role": "user"}]), "messages[0].content"),
    "unknown part type": (
        run_body(messages=[_user([{"type": "hologram"}])]),
        "messages[0].content[0].type",
    ),
    "bad base64": (
        run_body(
            messages=[
                _user(
                    [
                        {
                            "type": "image",
                            "source": {"type": "data", "value": "!!", "mimeType": "image/png"},
                        }
                    ]
                )
            ]
        ),
        "messages[0].content[0].source.value",
    ),
    "empty threadId": (run_body(thread_id=""), "threadId"),
    "long threadId": (run_body(thread_id="t" * 129), "threadId"),
    "threadId with a slash": (run_body(thread_id="a/b"), "threadId"),
    "empty runId": (run_body(run_id=""), "runId"),
    "long runId": (run_body(run_id="r" * 129), "runId"),
    "empty message id": (run_body(messages=[_user("hi", mid="")]), "messages[0].id"),
    "long message id": (run_body(messages=[_user("hi", mid="m" * 129)]), "messages[0].id"),
    "missing message id": (
        run_body(messages=[{"role": "user", "content": "hi"}]),
        "messages[0].id",
    ),
    "long parentRunId": (run_body(parentRunId="p" * 129), "parentRunId"),
    "tool without name": (run_body(tools=[{"description": "d"}]), "tools[0].name"),
    "context entry without value": (run_body(context=[{"description": "d"}]), "context[0].value"),
    "agentmesh props not an object": (
        run_body(forwardedProps={"agentmesh": "x"}),
        "forwardedProps.agentmesh",
    ),
    "profile not a string": (
        run_body(forwardedProps={"agentmesh": {"profile": 3}}),
        "forwardedProps.agentmesh.profile",
    ),
    "profile too long": (
        run_body(forwardedProps={"agentmesh": {"profile": "p" * 101}}),
        "forwardedProps.agentmesh.profile",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
async def test_bad_run_input_is_400_naming_the_field(
    case: str,
    http: httpx.AsyncClient,
    auth: dict[str, str],
    peers: Peers,
) -> None:
    body, field = BAD_BODIES[case]
    before = len(peers.orchestrator.calls)
    resp = await http.post(URL, json=body, headers=auth)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert error["details"][0]["field"] == field
    assert field in error["message"]
    assert len(peers.orchestrator.calls) == before


async def test_malformed_json_is_400_naming_the_body(
    http: httpx.AsyncClient,
    auth: dict[str, str],
) -> None:
    resp = await http.post(
        URL, content=b'{"threadId": "t",', headers={**auth, "Content-Type": "application/json"}
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["details"][0]["field"] == "body"


async def test_content_over_the_size_limit_is_400(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    gw_settings: Settings,
) -> None:
    text = "x" * (gw_settings.max_message_chars + 1)
    resp = await http.post(URL, json=run_body(text=text), headers=auth)
    assert resp.status_code == 400
    assert resp.json()["error"]["details"][0]["field"] == "messages[0].content"


async def test_content_at_the_size_limit_is_accepted(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    gw_settings: Settings,
) -> None:
    resp, _ = await post_run(http, run_body(text="x" * gw_settings.max_message_chars), auth)
    assert resp.status_code == 200


async def test_body_over_max_request_bytes_is_413(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    gw_settings: Settings,
) -> None:
    body = b"{" + b" " * gw_settings.max_request_bytes + b"}"
    resp = await http.post(URL, content=body, headers={**auth, "Content-Type": "application/json"})
    assert resp.status_code == 413
    assert resp.json()["error"]["details"][0]["field"] == "body"


async def test_chunked_body_over_max_request_bytes_is_413(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    gw_settings: Settings,
) -> None:
    async def chunks() -> Any:
        for _ in range(gw_settings.max_request_bytes // 65536 + 2):
            yield b" " * 65536

    resp = await http.post(
        URL, content=chunks(), headers={**auth, "Content-Type": "application/json"}
    )
    assert "content-length" not in resp.request.headers
    assert resp.status_code == 413


async def test_unknown_keys_are_accepted(http: httpx.AsyncClient, auth: dict[str, str]) -> None:
    # (`resume` is not among them: it answers approvals, run-agent-input.md.)
    body = run_body(protocolVersion="1.0", somethingNew={"a": 1})
    body["messages"][0]["futureField"] = True
    resp, raw = await post_run(http, body, auth)
    assert resp.status_code == 200
    assert parse_frames(raw)[-1]["type"] == "RUN_FINISHED"


async def test_last_user_message_becomes_the_start_run_request(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    peers: Peers,
    gw_settings: Settings,
) -> None:
    png = base64.b64encode(b"\x89PNG").decode()
    body = run_body(
        parentRunId="r-0",
        tools=[{"name": "lookup", "description": "find", "parameters": {"type": "object"}}],
        context=[{"description": "page", "value": "home"}],
        state={"n": 1},
        forwardedProps={"mode": "fast"},
    )
    body["messages"] = [
        {"id": "old", "role": "user", "content": "earlier"},
        {"id": "a0", "role": "assistant", "content": "reply"},
        _user(
            [
                {"type": "text", "text": "look"},
                {
                    "type": "image",
                    "source": {"type": "data", "value": png, "mimeType": "image/png"},
                },
                {
                    "type": "document",
                    "source": {
                        "type": "url",
                        "value": "https://x/y.pdf",
                        "mimeType": "application/pdf",
                    },
                },
            ],
            mid="u9",
        ),
    ]
    resp, _ = await post_run(http, body, {**auth, "X-Request-ID": "req-42"})
    assert resp.status_code == 200
    call = peers.orchestrator.calls[-1]
    req = call.request
    assert (req.thread_id, req.run_id, req.parent_run_id) == ("t-1", "r-1", "r-0")
    assert len(req.messages) == 1
    msg = req.messages[0]
    assert (msg.id, msg.role, msg.kind) == (
        "u9",
        message_pb2.ROLE_USER,
        message_pb2.MESSAGE_KIND_USER_MESSAGE,
    )
    assert [b.WhichOneof("block") for b in msg.content] == ["text", "data", "data"]
    assert msg.content[0].text.text == "look"
    assert (msg.content[1].data.mime_type, msg.content[1].data.data) == ("image/png", b"\x89PNG")
    assert msg.content[2].data.url == "https://x/y.pdf"
    assert req.tools[0].name == "lookup" and req.tools[0].parameters_json == '{"type": "object"}'
    assert (req.context[0].description, req.context[0].value) == ("page", "home")
    assert json_format.MessageToDict(req.state) == {"n": 1}
    assert json_format.MessageToDict(req.forwarded_props) == {"mode": "fast"}
    assert req.origin == message_pb2.RUNTIME_MODE_CHAT
    assert call.metadata["x-agentmesh-owner"] == "alice"
    assert call.metadata["x-request-id"] == "req-42"
    assert "x-agentmesh-scope" not in call.metadata
    assert call.time_remaining is not None
    # The run deadline (not the unary one) bounds the stream; grpc measures it with some slack.
    assert (
        gw_settings.run_timeout_seconds - 5
        < call.time_remaining
        < gw_settings.run_timeout_seconds + 1
    )


async def test_valid_x_timezone_is_passed_on(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    peers: Peers,
) -> None:
    await post_run(http, run_body(), {**auth, "X-Timezone": "Europe/Berlin"})
    assert peers.orchestrator.calls[-1].request.time_zone == "Europe/Berlin"


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus", "Europe", "America", "America/Argentina", "x" * 300, "../etc/passwd"]
)
async def test_unknown_x_timezone_is_left_to_the_default(
    zone: str,
    http: httpx.AsyncClient,
    auth: dict[str, str],
    peers: Peers,
) -> None:
    # A tzdata folder ("Europe") is not a zone: ignored like any unknown name, never a 500.
    resp, _ = await post_run(http, run_body(), {**auth, "X-Timezone": zone})
    assert resp.status_code == 200
    assert peers.orchestrator.calls[-1].request.time_zone == ""


async def test_profile_named_in_forwarded_props_is_sent_as_profile_name(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    peers: Peers,
) -> None:
    body = run_body(forwardedProps={"agentmesh": {"profile": "chat_no_router"}, "other": 1})
    resp, _ = await post_run(http, body, auth)
    assert resp.status_code == 200
    request = peers.orchestrator.calls[-1].request
    assert request.profile_name == "chat_no_router"
    assert json_format.MessageToDict(request.forwarded_props)["other"] == 1


async def test_no_profile_named_leaves_the_default_to_the_backend(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    peers: Peers,
) -> None:
    await post_run(http, run_body(forwardedProps={"x": True}), auth)
    assert peers.orchestrator.calls[-1].request.profile_name == ""


def _resume(entry: Any) -> dict[str, Any]:
    return run_body(resume=[entry])


def _answer(**payload: Any) -> dict[str, Any]:
    return {"interruptId": "call_1", "status": "resolved", "payload": payload}


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


# A resume as a hostile client would send it: each refused with 400 naming the field (or a
# field under it: the strict JSON check names the deepest one), before the orchestrator is
# asked (nothing of the run is stored). Raw JSON text where json.dumps would not write it.
HOSTILE_RESUMES: dict[str, tuple[Any, str]] = {
    "resume an object": (run_body(resume={"interruptId": "call_1"}), "resume"),
    "resume a string": (run_body(resume="approve"), "resume"),
    "entry a list": (_resume(["call_1", "approve"]), "resume[0]"),
    "entry null": (_resume(None), "resume[0]"),
    "interruptId an object": (
        _resume({"interruptId": {"id": "call_1"}, "status": "cancelled"}),
        "resume[0].interruptId",
    ),
    "interruptId a list": (
        _resume({"interruptId": ["call_1"], "status": "cancelled"}),
        "resume[0].interruptId",
    ),
    "interruptId a number": (
        _resume({"interruptId": 7, "status": "cancelled"}),
        "resume[0].interruptId",
    ),
    "interruptId huge": (
        _resume({"interruptId": "c" * 100_000, "status": "cancelled"}),
        "resume[0].interruptId",
    ),
    "interruptId with NUL": (
        _resume({"interruptId": "call\u00001", "status": "cancelled"}),
        "resume[0].interruptId",
    ),
    "status an object": (
        _resume({"interruptId": "call_1", "status": {"resolved": True}}),
        "resume[0].status",
    ),
    "status a list": (
        _resume({"interruptId": "call_1", "status": ["resolved"]}),
        "resume[0].status",
    ),
    "status a boolean": (_resume({"interruptId": "call_1", "status": True}), "resume[0].status"),
    "payload a list": (
        _resume({"interruptId": "call_1", "status": "resolved", "payload": ["approve"]}),
        "resume[0].payload",
    ),
    "payload a string": (
        _resume({"interruptId": "call_1", "status": "resolved", "payload": "approve"}),
        "resume[0].payload",
    ),
    "decision an object": (
        _resume(_answer(decision={"kind": "approve"})),
        "resume[0].payload.decision",
    ),
    "decision a list": (_resume(_answer(decision=["approve"])), "resume[0].payload.decision"),
    "decision a number": (_resume(_answer(decision=1)), "resume[0].payload.decision"),
    "decision null": (_resume(_answer(decision=None)), "resume[0].payload.decision"),
    "decision a boolean": (_resume(_answer(decision=True)), "resume[0].payload.decision"),
    "decision missing": (_resume(_answer()), "resume[0].payload.decision"),
    "decision huge": (_resume(_answer(decision="a" * 500_000)), "resume[0].payload.decision"),
    "arguments a list": (
        _resume(_answer(decision="edit", arguments=[1, 2])),
        "resume[0].payload.arguments",
    ),
    "arguments a string": (
        _resume(_answer(decision="edit", arguments='{"text": "x"}')),
        "resume[0].payload.arguments",
    ),
    "arguments huge": (
        _resume(_answer(decision="edit", arguments={"text": "x" * 500_000})),
        "resume[0].payload.arguments",
    ),
    "arguments with many keys": (
        _resume(_answer(decision="edit", arguments={f"k{i}": i for i in range(40_000)})),
        "resume[0].payload.arguments",
    ),
    "arguments nested too deep": (
        _resume(_answer(decision="edit", arguments=_nested(40))),
        "resume[0].payload.arguments",
    ),
    "arguments with NUL": (
        _resume(_answer(decision="edit", arguments={"text": "a\u0000b"})),
        "resume[0].payload.arguments.text",
    ),
    "arguments with a lone surrogate": (
        _resume(_answer(decision="edit", arguments={"text": "a\ud800b"})),
        "resume[0].payload.arguments.text",
    ),
    "arguments with a huge integer": (
        _resume(_answer(decision="edit", arguments={"n": 10**30})),
        "resume[0].payload.arguments.n",
    ),
    "arguments with NaN": (
        _resume(_answer(decision="edit", arguments={"n": float("nan")})),
        "resume[0].payload.arguments.n",
    ),
    "arguments with a lone surrogate key": (
        _resume(_answer(decision="edit", arguments={"a\udc00": 1})),
        "resume[0].payload.arguments",
    ),
    "too many entries": (
        run_body(resume=[{"interruptId": f"c{i}", "status": "cancelled"} for i in range(33)]),
        "resume",
    ),
    # Every field again, by each JSON type it is not, nested past the limit, and oversized.
    "resume a number": (run_body(resume=7), "resume"),
    "resume a boolean": (run_body(resume=True), "resume"),
    "resume nested lists": (run_body(resume=[[[["call_1"]]]]), "resume[0]"),
    "resume of 10,000 entries": (
        run_body(resume=[{"interruptId": "c", "status": "cancelled"}] * 10_000),
        "resume",
    ),
    "entry a string": (_resume("call_1"), "resume[0]"),
    "entry a number": (_resume(1), "resume[0]"),
    "entry a boolean": (_resume(False), "resume[0]"),
    "entry nested too deep": (_resume(_nested(40)), "resume[0]"),
    "the second entry bad": (
        run_body(resume=[{"interruptId": "call_1", "status": "cancelled"}, {"status": 1}]),
        "resume[1]",
    ),
    "interruptId null": (
        _resume({"interruptId": None, "status": "cancelled"}),
        "resume[0].interruptId",
    ),
    "interruptId a boolean": (
        _resume({"interruptId": True, "status": "cancelled"}),
        "resume[0].interruptId",
    ),
    "interruptId empty": (
        _resume({"interruptId": "", "status": "cancelled"}),
        "resume[0].interruptId",
    ),
    "interruptId missing": (_resume({"status": "cancelled"}), "resume[0].interruptId"),
    "interruptId nested too deep": (
        _resume({"interruptId": _nested(40), "status": "cancelled"}),
        "resume[0].interruptId",
    ),
    "interruptId with a lone surrogate": (
        _resume({"interruptId": "call\ud8001", "status": "cancelled"}),
        "resume[0].interruptId",
    ),
    "status null": (_resume({"interruptId": "call_1", "status": None}), "resume[0].status"),
    "status a number": (_resume({"interruptId": "call_1", "status": 1}), "resume[0].status"),
    "status missing": (_resume({"interruptId": "call_1"}), "resume[0].status"),
    "status another word": (
        _resume({"interruptId": "call_1", "status": "approved"}),
        "resume[0].status",
    ),
    "status in capitals": (
        _resume({"interruptId": "call_1", "status": "RESOLVED"}),
        "resume[0].status",
    ),
    "status huge": (
        _resume({"interruptId": "call_1", "status": "r" * 500_000}),
        "resume[0].status",
    ),
    "status nested too deep": (
        _resume({"interruptId": "call_1", "status": _nested(40)}),
        "resume[0].status",
    ),
    "payload null": (
        _resume({"interruptId": "call_1", "status": "resolved", "payload": None}),
        "resume[0].payload",
    ),
    "payload a number": (
        _resume({"interruptId": "call_1", "status": "resolved", "payload": 1}),
        "resume[0].payload",
    ),
    "payload a boolean": (
        _resume({"interruptId": "call_1", "status": "resolved", "payload": True}),
        "resume[0].payload",
    ),
    "payload missing": (
        _resume({"interruptId": "call_1", "status": "resolved"}),
        "resume[0].payload",
    ),
    "payload nested too deep": (
        _resume({"interruptId": "call_1", "status": "resolved", "payload": _nested(40)}),
        "resume[0].payload",
    ),
    "payload with another key": (
        _resume(_answer(decision="approve", reason="because")),
        "resume[0].payload.reason",
    ),
    "payload with a huge key": (
        _resume(_answer(decision="approve", **{"k" * 100_000: 1})),
        "resume[0].payload",
    ),
    "decision empty": (_resume(_answer(decision="")), "resume[0].payload.decision"),
    "decision in capitals": (_resume(_answer(decision="APPROVE")), "resume[0].payload.decision"),
    "decision with spaces": (_resume(_answer(decision=" approve ")), "resume[0].payload.decision"),
    "decision with NUL": (_resume(_answer(decision="approve\u0000")), "resume[0].payload.decision"),
    "decision nested too deep": (
        _resume(_answer(decision=_nested(40))),
        "resume[0].payload.decision",
    ),
    "arguments null": (
        _resume(_answer(decision="edit", arguments=None)),
        "resume[0].payload.arguments",
    ),
    "arguments a number": (
        _resume(_answer(decision="edit", arguments=3)),
        "resume[0].payload.arguments",
    ),
    "arguments a boolean": (
        _resume(_answer(decision="edit", arguments=False)),
        "resume[0].payload.arguments",
    ),
    "arguments missing for edit": (
        _resume(_answer(decision="edit")),
        "resume[0].payload.arguments",
    ),
    "arguments with approve": (
        _resume(_answer(decision="approve", arguments={"text": "x"})),
        "resume[0].payload.arguments",
    ),
    "arguments with deny": (
        _resume(_answer(decision="deny", arguments={})),
        "resume[0].payload.arguments",
    ),
    "arguments nested lists too deep": (
        _resume(
            _answer(
                decision="edit",
                arguments={
                    "a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
                },
            )
        ),
        "resume[0].payload.arguments",
    ),
    "arguments with a huge key": (
        _resume(_answer(decision="edit", arguments={"k" * 500_000: 1})),
        "resume[0].payload.arguments",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_RESUMES))
async def test_a_hostile_resume_is_400_naming_the_field_and_nothing_starts(
    case: str, http: httpx.AsyncClient, auth: dict[str, str], peers: Peers
) -> None:
    body, field = HOSTILE_RESUMES[case]
    before = len(peers.orchestrator.calls)
    # ASCII JSON: a lone surrogate goes as its \\u escape, NaN as the bare word (not JSON).
    raw = json.dumps(body).encode()
    resp = await http.post(URL, content=raw, headers={**auth, "Content-Type": "application/json"})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    named = error["details"][0]["field"]
    assert named == field or named.startswith(f"{field}."), (named, field)
    assert len(peers.orchestrator.calls) == before
