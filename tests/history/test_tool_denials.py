"""Refused tool calls: stored by FinishRun with the run, listed by the admin audit."""

from __future__ import annotations

import hashlib

import grpc
import pytest
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.type.v1 import execution_profile_pb2, message_pb2

from shared import errors
from tests.history.conftest import AUTOMATION, History, begin, text_msg

DIGEST = hashlib.sha256(b'{"content": "x"}').hexdigest()


def denial(
    call_id: str, tool: str = "memory_write", reason: int = pb.TOOL_DENIAL_REASON_NOT_IN_PROFILE
) -> pb.ToolDenial:
    return pb.ToolDenial(
        tool_call_id=call_id, tool_name=tool, arguments_sha256=DIGEST, reason=reason
    )


async def finish_with(
    h: History, run_id: str, denials: list[pb.ToolDenial], owner: str = "alice"
) -> pb.FinishRunResponse:
    return await h.stub.FinishRun(
        pb.FinishRunRequest(run_id=run_id, state=pb.RUN_STATE_SUCCEEDED, tool_denials=denials),
        metadata=h.md(owner),
    )


async def audit(h: History, owner: str = "alice", **fields: object) -> pb.ListAuditResponse:
    return await h.stub.ListAudit(
        pb.ListAuditRequest(owner_id=owner, **fields),
        metadata=h.md("root", admin=True),
    )


async def test_denials_are_audited_with_the_runs_owner_thread_and_profile(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("m1")])
    await finish_with(
        history, "r1", [denial("c1"), denial("c2", "rm_rf", pb.TOOL_DENIAL_REASON_NOT_REGISTERED)]
    )
    found = (await audit(history)).tool_denials
    assert [(d.tool_call_id, d.tool_name, d.reason) for d in found] == [
        ("c1", "memory_write", pb.TOOL_DENIAL_REASON_NOT_IN_PROFILE),
        ("c2", "rm_rf", pb.TOOL_DENIAL_REASON_NOT_REGISTERED),
    ]
    d = found[0]
    assert (d.owner_id, d.run_id, d.thread_id, d.arguments_sha256) == ("alice", "r1", "t1", DIGEST)
    assert d.executor == execution_profile_pb2.EXECUTOR_WORKER
    assert d.execution_profile_name == "chat_default"
    assert d.origin == message_pb2.RUNTIME_MODE_CHAT
    assert list((await audit(history, "bob")).tool_denials) == []


async def test_retried_finish_stores_each_denial_once(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("m1")])
    await finish_with(history, "r1", [denial("c1")])
    await finish_with(history, "r1", [denial("c1")])
    assert len((await audit(history)).tool_denials) == 1


async def test_denials_filter_like_messages(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("m1")])
    await finish_with(history, "r1", [denial("c1")])
    await begin(history, "auto", "r2", [text_msg("m2")], mode=AUTOMATION)
    await finish_with(history, "r2", [denial("c2", "memory_search")])
    memory = await audit(
        history,
        filter=pb.AuditFilter(
            executor=execution_profile_pb2.EXECUTOR_MEMORY,
            execution_profile_name="automation_memory_default",
        ),
    )
    assert [d.tool_call_id for d in memory.tool_denials] == ["c2"]
    chat = await audit(history, filter=pb.AuditFilter(origin=message_pb2.RUNTIME_MODE_CHAT))
    assert [d.tool_call_id for d in chat.tool_denials] == ["c1"]


async def test_audit_pages_messages_and_denials_side_by_side(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("m1"), text_msg("m2"), text_msg("m3")])
    await finish_with(history, "r1", [denial(f"c{i}") for i in range(5)])
    messages, denials, token, pages = [], [], "", 0
    while True:
        page = await audit(history, page_size=2, page_token=token)
        messages += [m.id for m in page.messages]
        denials += [d.tool_call_id for d in page.tool_denials]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert messages == ["m1", "m2", "m3"]
    assert denials == [f"c{i}" for i in range(5)]
    assert pages == 3


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (
            pb.ToolDenial(
                tool_call_id="c",
                tool_name="t",
                arguments_sha256="raw args",
                reason=pb.TOOL_DENIAL_REASON_NOT_DECLARED,
            ),
            "tool_denials[0].arguments_sha256",
        ),
        (
            pb.ToolDenial(tool_call_id="c", tool_name="t", arguments_sha256=DIGEST),
            "tool_denials[0].reason",
        ),
        (
            pb.ToolDenial(
                tool_name="t", arguments_sha256=DIGEST, reason=pb.TOOL_DENIAL_REASON_NOT_DECLARED
            ),
            "tool_denials[0].tool_call_id",
        ),
    ],
)
async def test_bad_denial_is_invalid_argument_and_nothing_is_stored(
    history: History, bad: pb.ToolDenial, field: str
) -> None:
    await begin(history, "t1", "r1", [text_msg("m1")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await finish_with(history, "r1", [bad])
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert errors.from_rpc_error(info.value).violations[0][0] == field
    assert list((await audit(history)).tool_denials) == []
