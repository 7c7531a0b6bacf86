"""The history service through gRPC: visibility, modes, idempotency, runs, pagination,
context windows, owner isolation and audit."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import grpc
import pytest
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.type.v1 import content_pb2, execution_profile_pb2, message_pb2
from google.protobuf import timestamp_pb2

from tests.history.conftest import (
    AUTOMATION,
    CHAT,
    REPLY,
    History,
    append,
    begin,
    finish,
    ids,
    text_msg,
    tool_call_msg,
    tool_result_msg,
)


async def history_of(h: History, thread_id: str, owner: str = "alice", **kw: object) -> list[str]:
    resp = await h.stub.ListHistory(
        pb.ListHistoryRequest(thread_id=thread_id, **kw),
        metadata=h.md(owner),
    )
    return ids(resp.messages)


async def context_of(h: History, thread_id: str, owner: str = "alice", **opts: object) -> list[str]:
    resp = await h.stub.LoadContext(
        pb.LoadContextRequest(
            thread_id=thread_id,
            context=pb.ContextOptions(**opts),
            page_size=1000,
        ),
        metadata=h.md(owner),
    )
    return ids(resp.messages)


async def rpc_error(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        # The call object of an aio stub is awaitable.
        await call  # type: ignore[misc]
    return err.value


# --- visibility -------------------------------------------------------------------------------


async def test_chat_message_and_reply_are_in_history_and_in_the_next_runs_context(
    history: History,
) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    await finish(history, "r1", [text_msg("a1", REPLY)])
    assert await history_of(history, "t1") == ["u1", "a1"]
    nxt = await begin(history, "t1", "r2", [text_msg("u2")])
    assert ids(nxt.context_messages) == ["u1", "a1", "u2"]
    assert [m.visibility_mask for m in nxt.context_messages] == [3, 3, 3]


async def test_automation_input_is_hidden_and_its_reply_is_shown_but_never_context(
    history: History,
) -> None:
    started = await begin(history, "job-1", "r1", [text_msg("in")], mode=AUTOMATION)
    assert ids(started.context_messages) == []
    await finish(history, "r1", [text_msg("out", REPLY)])
    assert await history_of(history, "job-1") == ["out"]
    assert await context_of(history, "job-1") == []
    audit = await history.stub.ListAudit(
        pb.ListAuditRequest(owner_id="alice"), metadata=history.md("admin", admin=True)
    )
    by_id = {m.id: m for m in audit.messages}
    assert by_id["in"].visibility_mask == 0 and by_id["in"].metadata.hidden_from_user
    assert by_id["out"].visibility_mask == 1 and not by_id["out"].metadata.hidden_from_user
    for m in audit.messages:
        assert m.metadata.origin == AUTOMATION
        assert m.metadata.executor == execution_profile_pb2.EXECUTOR_MEMORY
        assert m.metadata.execution_profile_name == "automation_memory_default"


async def test_a_failed_automation_attempts_reply_is_kept_for_the_audit_only(
    history: History,
) -> None:
    """A memory job's failed attempt (MEMORY_OUTPUT_UNUSABLE: prose instead of memories)
    is not the job's answer: its reply is neither in the job thread's /history nor in any
    context, and the audit keeps it (mask 0, hiddenFromUser). The retry's reply shows."""
    await begin(history, "job-1", "r1", [text_msg("in1")], mode=AUTOMATION)
    await history.stub.FinishRun(
        pb.FinishRunRequest(
            run_id="r1",
            state=pb.RUN_STATE_FAILED,
            error_code="MEMORY_OUTPUT_UNUSABLE",
            output_messages=[
                tool_call_msg("call1", "c-1"),
                tool_result_msg("res1", "c-1"),
                text_msg("prose", REPLY),
            ],
        ),
        metadata=history.md(),
    )
    await begin(history, "job-1", "r2", [text_msg("in2")], mode=AUTOMATION)
    await finish(history, "r2", [text_msg("answer", REPLY)])
    assert await history_of(history, "job-1") == ["answer"]
    assert await context_of(history, "job-1") == []
    audit = await history.stub.ListAudit(
        pb.ListAuditRequest(owner_id="alice"), metadata=history.md("admin", admin=True)
    )
    by_id = {m.id: m for m in audit.messages}
    for mid in ("call1", "res1", "prose"):
        assert by_id[mid].visibility_mask == 0 and by_id[mid].metadata.hidden_from_user, mid
    assert by_id["answer"].visibility_mask == 1


async def test_a_failed_chat_runs_partial_reply_stays_as_the_user_saw_it(
    history: History,
) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    await history.stub.FinishRun(
        pb.FinishRunRequest(
            run_id="r1", state=pb.RUN_STATE_FAILED, output_messages=[text_msg("a1", REPLY)]
        ),
        metadata=history.md(),
    )
    assert await history_of(history, "t1") == ["u1", "a1"]
    assert await context_of(history, "t1") == ["u1", "a1"]


async def test_a_mask_sent_by_the_caller_is_ignored(history: History) -> None:
    resp = await append(history, "t1", [text_msg("u1", visibility_mask=3)], mode=AUTOMATION)
    assert resp.messages[0].visibility_mask == 0
    assert resp.messages[0].metadata.hidden_from_user


async def test_tool_messages_of_a_chat_run_are_history_and_context(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    await finish(
        history,
        "r1",
        [tool_call_msg("c1", "call-1"), tool_result_msg("c2", "call-1"), text_msg("a1", REPLY)],
    )
    assert await history_of(history, "t1") == ["u1", "c1", "c2", "a1"]
    assert await context_of(history, "t1") == ["u1", "c1", "c2", "a1"]


async def test_every_block_type_comes_back_as_it_was_sent(history: History) -> None:
    sent = message_pb2.Message(
        id="rich",
        role=message_pb2.ROLE_ASSISTANT,
        kind=REPLY,
        content=[
            content_pb2.ContentBlock(text=content_pb2.TextBlock(text="t")),
            content_pb2.ContentBlock(thinking=content_pb2.ThinkingBlock(thinking="hm")),
            content_pb2.ContentBlock(hint=content_pb2.HintBlock(hint="h")),
            content_pb2.ContentBlock(
                data=content_pb2.DataBlock(mime_type="image/png", data=b"\x89PNG")
            ),
            content_pb2.ContentBlock(
                data=content_pb2.DataBlock(mime_type="audio/wav", url="https://x/a.wav")
            ),
            content_pb2.ContentBlock(
                tool_call=content_pb2.ToolCallBlock(
                    id="c", name="f", input='{"a": 1}', state=content_pb2.TOOL_CALL_STATE_FINISHED
                )
            ),
            content_pb2.ContentBlock(
                tool_result=content_pb2.ToolResultBlock(
                    id="c",
                    name="f",
                    state=content_pb2.TOOL_RESULT_STATE_SUCCESS,
                    blocks=content_pb2.ContentBlocks(
                        blocks=[content_pb2.ContentBlock(text=content_pb2.TextBlock(text="nested"))]
                    ),
                )
            ),
        ],
        usage=message_pb2.Usage(input_tokens=3, output_tokens=4),
        finished_reason="stop",
    )
    await append(history, "t1", [sent])
    got = (
        await history.stub.ListHistory(pb.ListHistoryRequest(thread_id="t1"), metadata=history.md())
    ).messages[0]
    assert list(got.content) == list(sent.content)
    assert (got.usage, got.finished_reason) == (sent.usage, "stop")


# --- modes ------------------------------------------------------------------------------------


async def test_begin_run_of_the_other_mode_fails_and_stores_nothing(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    err = await rpc_error(begin(history, "t1", "r2", [text_msg("u2")], mode=AUTOMATION))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    thread = await history.stub.GetThread(
        pb.GetThreadRequest(thread_id="t1"), metadata=history.md()
    )
    assert thread.thread.message_count == 1
    err = await rpc_error(history.stub.GetRun(pb.GetRunRequest(run_id="r2"), metadata=history.md()))
    assert err.code() == grpc.StatusCode.NOT_FOUND


async def test_append_of_the_other_mode_fails_and_stores_nothing(history: History) -> None:
    await append(history, "t1", [text_msg("u1")], mode=AUTOMATION)
    err = await rpc_error(append(history, "t1", [text_msg("u2"), text_msg("u3")], mode=CHAT))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    origin_only = text_msg("u4", metadata=message_pb2.MessageMetadata(origin=CHAT))
    err = await rpc_error(
        history.stub.AppendMessages(
            pb.AppendMessagesRequest(thread_id="t1", messages=[origin_only]), metadata=history.md()
        )
    )
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    audit = await history.stub.ListAudit(
        pb.ListAuditRequest(owner_id="alice"), metadata=history.md("root", admin=True)
    )
    assert ids(audit.messages) == ["u1"]


async def test_a_message_origin_other_than_the_runs_mode_is_invalid(history: History) -> None:
    bad = text_msg("u1", metadata=message_pb2.MessageMetadata(origin=AUTOMATION))
    err = await rpc_error(begin(history, "t1", "r1", [bad]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "input_messages[0].metadata.origin" in (err.details() or "")


async def test_metadata_executor_and_profile_name_are_stored_as_given(history: History) -> None:
    meta = message_pb2.MessageMetadata(
        executor=execution_profile_pb2.EXECUTOR_MEMORY,
        execution_profile_name="custom_x",
    )
    meta.extra_json = '{"source": "import", "n": 12345678901}'
    resp = await append(history, "t1", [text_msg("u1", metadata=meta)])
    stored = resp.messages[0].metadata
    assert stored.executor == execution_profile_pb2.EXECUTOR_MEMORY
    assert stored.execution_profile_name == "custom_x"
    assert stored.origin == CHAT
    assert json.loads(stored.extra_json) == {"source": "import", "n": 12345678901}
    legacy = message_pb2.MessageMetadata()
    legacy.extra.update({"source": "old"})
    resp = await append(history, "t1", [text_msg("u2", metadata=legacy)])
    assert json.loads(resp.messages[0].metadata.extra_json) == {"source": "old"}


# --- idempotency and runs ---------------------------------------------------------------------


async def test_appending_the_same_message_id_again_stores_nothing_new(history: History) -> None:
    first = await append(history, "t1", [text_msg("u1", text="original")])
    again = await append(history, "t1", [text_msg("u1", text="changed"), text_msg("u2")])
    assert again.messages[0] == first.messages[0]
    assert [m.position for m in again.messages] == [1, 2]
    assert await history_of(history, "t1") == ["u1", "u2"]


async def test_a_message_id_used_in_another_thread_already_exists(history: History) -> None:
    await append(history, "t1", [text_msg("u1")])
    err = await rpc_error(append(history, "t2", [text_msg("u1")]))
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS


async def test_begin_run_retry_returns_the_same_run_and_stores_once(history: History) -> None:
    first = await begin(history, "t1", "r1", [text_msg("u1")])
    again = await begin(history, "t1", "r1", [text_msg("u1")])
    assert again.run == first.run
    assert again.thread.message_count == 1
    assert first.run.state == pb.RUN_STATE_RUNNING
    assert first.run.profile.name == "chat_default"


async def test_begin_run_with_a_run_id_of_another_thread_already_exists(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    err = await rpc_error(begin(history, "t2", "r1", [text_msg("u2")]))
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS


# BeginRun and FinishRun insert new messages without looking their ids up first; a stored
# id fails the insert, and the whole call runs again with the lookup.


async def test_begin_run_whose_input_is_stored_already_in_the_thread_stores_it_once(
    history: History,
) -> None:
    await append(history, "t1", [text_msg("u0"), text_msg("u1", text="original")])
    resp = await begin(history, "t1", "r1", [text_msg("u1", text="resent")])
    assert resp.run.state == pb.RUN_STATE_RUNNING
    assert resp.thread.message_count == 2
    assert [(m.id, m.content[0].text.text) for m in resp.context_messages] == [
        ("u0", "u0"),
        ("u1", "original"),
    ]
    assert await history_of(history, "t1") == ["u0", "u1"]
    # The thread's positions were not consumed by the failed first attempt.
    more = await append(history, "t1", [text_msg("u2")])
    assert more.messages[0].position == 3


async def test_begin_run_with_an_input_id_of_another_thread_stores_nothing(
    history: History,
) -> None:
    await append(history, "t1", [text_msg("u1")])
    err = await rpc_error(begin(history, "t2", "r2", [text_msg("u1")]))
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "messages[0].id" in (err.details() or "")
    missing = await rpc_error(
        history.stub.GetRun(pb.GetRunRequest(run_id="r2"), metadata=history.md())
    )
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    missing = await rpc_error(
        history.stub.GetThread(pb.GetThreadRequest(thread_id="t2"), metadata=history.md())
    )
    assert missing.code() == grpc.StatusCode.NOT_FOUND


async def test_finish_run_with_an_output_id_of_another_thread_changes_nothing(
    history: History,
) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    await append(history, "t2", [text_msg("x1")])
    err = await rpc_error(finish(history, "r1", [text_msg("x1", REPLY)]))
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    run = await history.stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=history.md())
    assert run.run.state == pb.RUN_STATE_RUNNING
    assert await history_of(history, "t1") == ["u1"]
    # The run can still finish, with a reply of its own.
    done = await finish(history, "r1", [text_msg("a1", REPLY)])
    assert done.run.state == pb.RUN_STATE_SUCCEEDED
    assert await history_of(history, "t1") == ["u1", "a1"]


async def test_finish_run_whose_output_is_stored_already_stores_it_once(
    history: History,
) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    await append(history, "t1", [text_msg("a1", REPLY, run_id="r1")])
    done = await finish(history, "r1", [text_msg("a1", REPLY), text_msg("a2", REPLY)])
    assert done.run.state == pb.RUN_STATE_SUCCEEDED
    assert await history_of(history, "t1") == ["u1", "a1", "a2"]


async def test_finish_run_sets_state_and_errors_and_is_idempotent(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    done = await history.stub.FinishRun(
        pb.FinishRunRequest(
            run_id="r1",
            state=pb.RUN_STATE_FAILED,
            error_code="MODEL_DOWN",
            error_message="no model",
            output_messages=[text_msg("a1", REPLY)],
        ),
        metadata=history.md(),
    )
    assert (done.run.state, done.run.error_code) == (pb.RUN_STATE_FAILED, "MODEL_DOWN")
    assert done.run.HasField("finish_time")
    again = await finish(history, "r1", [text_msg("a2", REPLY)], state=pb.RUN_STATE_FAILED)
    assert again.run == done.run
    assert await history_of(history, "t1") == ["u1", "a1"]
    err = await rpc_error(finish(history, "r1", [], state=pb.RUN_STATE_SUCCEEDED))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_finish_of_an_unknown_run_is_not_found(history: History) -> None:
    err = await rpc_error(finish(history, "nope", []))
    assert err.code() == grpc.StatusCode.NOT_FOUND


async def test_finish_with_a_non_terminal_state_is_invalid(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    err = await rpc_error(finish(history, "r1", [], state=pb.RUN_STATE_RUNNING))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- pagination -------------------------------------------------------------------------------


async def test_history_pages_forward_and_backward(history: History) -> None:
    await append(history, "t1", [text_msg(f"m{i}") for i in range(1, 8)])
    for direction, expected in (
        (pb.DIRECTION_FORWARD, [f"m{i}" for i in range(1, 8)]),
        (pb.DIRECTION_BACKWARD, [f"m{i}" for i in range(7, 0, -1)]),
    ):
        seen, token = [], ""
        while True:
            resp = await history.stub.ListHistory(
                pb.ListHistoryRequest(
                    thread_id="t1", page_size=3, page_token=token, direction=direction
                ),
                metadata=history.md(),
            )
            seen += ids(resp.messages)
            token = resp.next_page_token
            if not token:
                break
        assert seen == expected


async def test_a_page_token_is_bound_to_thread_and_direction(history: History) -> None:
    await append(history, "t1", [text_msg(f"m{i}") for i in range(3)])
    await append(history, "t2", [text_msg(f"n{i}") for i in range(3)])
    first = await history.stub.ListHistory(
        pb.ListHistoryRequest(thread_id="t1", page_size=1), metadata=history.md()
    )
    for request in (
        pb.ListHistoryRequest(thread_id="t2", page_token=first.next_page_token),
        pb.ListHistoryRequest(
            thread_id="t1", page_token=first.next_page_token, direction=pb.DIRECTION_BACKWARD
        ),
        pb.ListHistoryRequest(thread_id="t1", page_token="garbage!"),
    ):
        err = await rpc_error(history.stub.ListHistory(request, metadata=history.md()))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "page_token" in (err.details() or "")


async def test_a_page_token_is_bound_to_its_owner(history: History) -> None:
    # Thread ids are per owner: bob may have a t1 too, and alice's positions are not his.
    for owner in ("alice", "bob"):
        for name in ("t1", "t2"):
            await append(
                history, name, [text_msg(f"{owner}-{name}-{i}") for i in range(2)], owner=owner
            )
    alice, bob = history.md("alice"), history.md("bob")
    threads = await history.stub.ListThreads(pb.ListThreadsRequest(page_size=1), metadata=alice)
    messages = await history.stub.ListHistory(
        pb.ListHistoryRequest(thread_id="t1", page_size=1), metadata=alice
    )
    assert threads.next_page_token and messages.next_page_token
    for call in (
        history.stub.ListThreads(
            pb.ListThreadsRequest(page_token=threads.next_page_token), metadata=bob
        ),
        history.stub.ListHistory(
            pb.ListHistoryRequest(thread_id="t1", page_token=messages.next_page_token),
            metadata=bob,
        ),
    ):
        err = await rpc_error(call)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "page_token" in (err.details() or "")


@pytest.mark.parametrize("size", [-1, 1001])
async def test_page_size_out_of_range_is_invalid(history: History, size: int) -> None:
    await append(history, "t1", [text_msg("m1")])
    err = await rpc_error(
        history.stub.ListHistory(
            pb.ListHistoryRequest(thread_id="t1", page_size=size), metadata=history.md()
        )
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "page_size" in (err.details() or "")


async def test_page_size_defaults_to_50(history: History) -> None:
    await append(history, "t1", [text_msg(f"m{i}") for i in range(60)])
    resp = await history.stub.ListHistory(
        pb.ListHistoryRequest(thread_id="t1"), metadata=history.md()
    )
    assert len(resp.messages) == 50 and resp.next_page_token


async def test_concurrent_appends_get_dense_positions(history: History) -> None:
    await append(history, "t1", [text_msg("seed")])
    await asyncio.gather(*(append(history, "t1", [text_msg(f"m{i}")]) for i in range(50)))
    audit = await history.stub.ListAudit(
        pb.ListAuditRequest(owner_id="alice", page_size=1000), metadata=history.md("r", admin=True)
    )
    assert sorted(m.position for m in audit.messages) == list(range(1, 52))
    thread = await history.stub.GetThread(
        pb.GetThreadRequest(thread_id="t1"), metadata=history.md()
    )
    assert thread.thread.message_count == 51


async def test_paging_while_appending_returns_each_message_once(history: History) -> None:
    await append(history, "t1", [text_msg("seed")])

    async def writer() -> None:
        for i in range(40):
            await append(history, "t1", [text_msg(f"w{i}")])

    async def reader() -> list[message_pb2.Message]:
        seen: list[message_pb2.Message] = []
        token = ""
        while True:
            resp = await history.stub.ListHistory(
                pb.ListHistoryRequest(thread_id="t1", page_size=2, page_token=token),
                metadata=history.md(),
            )
            seen += resp.messages
            token = resp.next_page_token
            if not token:
                return seen

    _, seen = await asyncio.gather(writer(), reader())
    final = await history_of(history, "t1", page_size=1000)
    # No duplicate, no gap: what the reader saw is exactly the start of the final history.
    assert [m.position for m in seen] == list(range(1, len(seen) + 1))
    assert ids(seen) == final[: len(seen)]
    assert len(final) == 41


# --- context ----------------------------------------------------------------------------------


async def test_context_today_yesterday_uses_the_time_zone(history: History) -> None:
    # 2024-03-11 10:00 New York (EDT); yesterday, the 23-hour 03-10, began 05:00 UTC.
    history.clock.now = datetime(2024, 3, 10, 4, 59, tzinfo=UTC)
    await append(history, "t1", [text_msg("before")])
    history.clock.now = datetime(2024, 3, 10, 5, 0, tzinfo=UTC)
    await append(history, "t1", [text_msg("yesterday")])
    history.clock.now = datetime(2024, 3, 11, 14, 0, tzinfo=UTC)
    await append(history, "t1", [text_msg("today")])
    got = await context_of(history, "t1", window="today_yesterday", time_zone="America/New_York")
    assert got == ["yesterday", "today"]
    # In Shanghai it is already 03-11 22:00, so yesterday began 03-09 16:00 UTC.
    got = await context_of(history, "t1", window="today_yesterday")
    assert got == ["before", "yesterday", "today"]


async def test_context_last_n_and_budget_keep_tool_groups_whole(history: History) -> None:
    await append(
        history,
        "t1",
        [
            text_msg("u1", text="x" * 50),
            tool_call_msg("c1", "k1", args="{}"),  # "lookup{}" = 8 chars
            tool_result_msg("r1", "k1", output="y" * 20),
            text_msg("a1", REPLY, text="z" * 10),
        ],
    )
    assert await context_of(history, "t1", window="last_n:2") == ["a1"]
    assert await context_of(history, "t1", max_chars=38) == ["c1", "r1", "a1"]
    assert await context_of(history, "t1", max_chars=37) == ["a1"]


async def test_context_pages_through_a_windowed_context_once(history: History) -> None:
    await append(history, "t1", [text_msg(f"m{i}") for i in range(10)])
    seen, token = [], ""
    while True:
        resp = await history.stub.LoadContext(
            pb.LoadContextRequest(
                thread_id="t1",
                page_size=3,
                page_token=token,
                context=pb.ContextOptions(window="last_n:7"),
            ),
            metadata=history.md(),
        )
        seen += ids(resp.messages)
        token = resp.next_page_token
        if not token:
            break
        # Appends between pages do not shift the window: a paged context is a snapshot.
        await append(history, "t1", [text_msg(f"late{len(seen)}")])
    assert seen == [f"m{i}" for i in range(3, 10)]


@pytest.mark.parametrize("size", [1, 3, 4, 10, 11])
async def test_an_uncut_context_pages_through_every_context_message_once(
    history: History, size: int
) -> None:
    # Tool messages are context too; automation-hidden ones never are (another thread).
    await append(history, "t1", [text_msg(f"m{i}") for i in range(4)])
    await append(history, "t1", [tool_call_msg("c1", "call-1"), tool_result_msg("r1", "call-1")])
    await append(history, "t1", [text_msg(f"n{i}") for i in range(4)])
    whole = await history.stub.LoadContext(
        pb.LoadContextRequest(thread_id="t1", page_size=200), metadata=history.md()
    )
    seen, token = [], ""
    while True:
        resp = await history.stub.LoadContext(
            pb.LoadContextRequest(thread_id="t1", page_size=size, page_token=token),
            metadata=history.md(),
        )
        assert 0 < len(resp.messages) <= size
        seen += list(resp.messages)
        token = resp.next_page_token
        if not token:
            break
    assert (
        [m.id for m in seen]
        == [m.id for m in whole.messages]
        == [*(f"m{i}" for i in range(4)), "c1", "r1", *(f"n{i}" for i in range(4))]
    )
    assert [m.position for m in seen] == sorted({m.position for m in seen})


async def test_context_with_a_bad_window_or_zone_is_invalid(history: History) -> None:
    await append(history, "t1", [text_msg("m")])
    for opts, field in (
        ({"window": "last_week"}, "context.window"),
        ({"time_zone": "Nowhere/City"}, "context.time_zone"),
    ):
        err = await rpc_error(
            history.stub.LoadContext(
                pb.LoadContextRequest(thread_id="t1", context=pb.ContextOptions(**opts)),
                metadata=history.md(),
            )
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (err.details() or "")


async def test_context_across_threads_spans_the_owners_chat_threads_in_time_order(
    history: History,
) -> None:
    await append(history, "a", [text_msg("a1")])
    history.clock.advance(minutes=1)
    await append(history, "b", [text_msg("b1")])
    history.clock.advance(minutes=1)
    await append(
        history, "job", [text_msg("auto-in"), text_msg("auto-out", REPLY)], mode=AUTOMATION
    )
    await append(history, "a", [text_msg("a2", REPLY)])
    await append(history, "x", [text_msg("bob1")], owner="bob")
    resp = await history.stub.LoadContext(
        pb.LoadContextRequest(across_threads=True, page_size=2), metadata=history.md()
    )
    page2 = await history.stub.LoadContext(
        pb.LoadContextRequest(across_threads=True, page_size=2, page_token=resp.next_page_token),
        metadata=history.md(),
    )
    assert ids(resp.messages) + ids(page2.messages) == ["a1", "b1", "a2"]
    assert page2.next_page_token == ""


# --- threads ----------------------------------------------------------------------------------


async def test_list_threads_newest_update_first_with_paging(history: History) -> None:
    for name in ("t1", "t2", "t3"):
        await append(history, name, [text_msg(f"{name}-m")])
        history.clock.advance(seconds=1)
    await append(history, "t1", [text_msg("t1-again")])
    first = await history.stub.ListThreads(
        pb.ListThreadsRequest(page_size=2), metadata=history.md()
    )
    rest = await history.stub.ListThreads(
        pb.ListThreadsRequest(page_size=2, page_token=first.next_page_token), metadata=history.md()
    )
    assert [t.id for t in [*first.threads, *rest.threads]] == ["t1", "t3", "t2"]
    assert first.threads[0].update_time.ToDatetime(tzinfo=UTC) == history.clock.now
    assert first.threads[0].runtime_mode == CHAT


# --- owners and audit -------------------------------------------------------------------------


async def test_another_owner_sees_nothing_whatever_ids_it_sends(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    stub, bob = history.stub, history.md("bob")
    for call in (
        stub.ListHistory(pb.ListHistoryRequest(thread_id="t1"), metadata=bob),
        stub.LoadContext(pb.LoadContextRequest(thread_id="t1"), metadata=bob),
        stub.GetThread(pb.GetThreadRequest(thread_id="t1"), metadata=bob),
        stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=bob),
        stub.FinishRun(
            pb.FinishRunRequest(run_id="r1", state=pb.RUN_STATE_SUCCEEDED), metadata=bob
        ),
    ):
        err = await rpc_error(call)
        assert err.code() == grpc.StatusCode.NOT_FOUND
        assert "alice" not in (err.details() or "")
    assert list((await stub.ListThreads(pb.ListThreadsRequest(), metadata=bob)).threads) == []
    across = await stub.LoadContext(pb.LoadContextRequest(across_threads=True), metadata=bob)
    assert list(across.messages) == []
    # Bob's own thread with the same id is his, and holds none of Alice's messages.
    await append(history, "t1", [text_msg("b1")], owner="bob")
    assert await history_of(history, "t1", owner="bob") == ["b1"]
    assert await history_of(history, "t1") == ["u1"]
    run = await stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=history.md())
    assert run.run.state == pb.RUN_STATE_RUNNING


async def test_a_call_without_owner_is_unauthenticated(history: History) -> None:
    err = await rpc_error(history.stub.ListThreads(pb.ListThreadsRequest()))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_audit_needs_the_admin_scope(history: History) -> None:
    await append(history, "t1", [text_msg("u1")])
    err = await rpc_error(
        history.stub.ListAudit(pb.ListAuditRequest(owner_id="alice"), metadata=history.md("alice"))
    )
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_audit_filters_by_origin_executor_profile_thread_and_time(history: History) -> None:
    start = history.clock.now
    await begin(history, "chat-1", "r1", [text_msg("c-in")])
    await finish(history, "r1", [text_msg("c-out", REPLY)])
    history.clock.advance(hours=1)
    await begin(history, "job-1", "r2", [text_msg("j-in")], mode=AUTOMATION)
    await finish(history, "r2", [text_msg("j-out", REPLY)])
    admin = history.md("ops", admin=True)

    async def audit(**flt: object) -> list[str]:
        resp = await history.stub.ListAudit(
            pb.ListAuditRequest(owner_id="alice", filter=pb.AuditFilter(**flt)),
            metadata=admin,
        )
        return ids(resp.messages)

    assert await audit() == ["c-in", "c-out", "j-in", "j-out"]
    assert await audit(origin=AUTOMATION) == ["j-in", "j-out"]
    assert await audit(executor=execution_profile_pb2.EXECUTOR_WORKER) == ["c-in", "c-out"]
    assert await audit(execution_profile_name="automation_memory_default") == ["j-in", "j-out"]
    assert await audit(thread_id="chat-1") == ["c-in", "c-out"]
    end = timestamp_pb2.Timestamp()
    end.FromDatetime(start.replace(minute=30))
    assert await audit(end_time=end) == ["c-in", "c-out"]
    assert await audit(start_time=end) == ["j-in", "j-out"]
    other = await history.stub.ListAudit(pb.ListAuditRequest(owner_id="bob"), metadata=admin)
    assert list(other.messages) == []


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.ListAuditRequest(owner_id=""), "owner_id"),
        (
            pb.ListAuditRequest(owner_id="alice", filter=pb.AuditFilter(thread_id="a b")),
            "filter.thread_id",
        ),
        (
            pb.ListAuditRequest(
                owner_id="alice",
                filter=pb.AuditFilter(
                    start_time=timestamp_pb2.Timestamp(seconds=200),
                    end_time=timestamp_pb2.Timestamp(seconds=100),
                ),
            ),
            "filter.end_time",
        ),
        (pb.ListAuditRequest(owner_id="alice", page_size=5000), "page_size"),
    ],
)
async def test_audit_rejects_bad_filters_naming_the_field(
    history: History, request_: pb.ListAuditRequest, field: str
) -> None:
    err = await rpc_error(history.stub.ListAudit(request_, metadata=history.md("ops", admin=True)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.details() or "").startswith(field)


async def test_an_audit_filter_enum_this_build_does_not_know_is_refused(history: History) -> None:
    # Read as UNSPECIFIED it would drop the filter and list more than was asked for.
    await begin(history, "t1", "r1", [text_msg("u1")])
    admin = history.md("ops", admin=True)
    for newer, field in (
        (pb.AuditFilter(origin=9), "filter.origin"),
        (pb.AuditFilter(executor=7), "filter.executor"),
    ):
        err = await rpc_error(
            history.stub.ListAudit(
                pb.ListAuditRequest(owner_id="alice", filter=newer), metadata=admin
            )
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (err.details() or "").startswith(field)


async def test_timestamps_come_back_in_utc(history: History) -> None:
    resp = await begin(history, "t1", "r1", [text_msg("u1")])
    assert resp.context_messages[0].created_at.ToDatetime(tzinfo=UTC) == history.clock.now
    assert resp.run.create_time.ToDatetime(tzinfo=UTC) == history.clock.now
