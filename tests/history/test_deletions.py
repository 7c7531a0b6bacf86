"""Thread and owner deletion in the history service, deletion records, and thread retention."""

from __future__ import annotations

import asyncio
import functools
import time
from datetime import UTC, datetime

import grpc
import pytest
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.history.v1 import history_service_pb2_grpc as pb_grpc

from services.history.service import build
from shared.settings import Settings
from tests.grpc_helpers import channel, running_service
from tests.history.conftest import (
    REPLY,
    Clock,
    History,
    begin,
    finish,
    text_msg,
    tool_call_msg,
)


async def _finished_thread(h: History, thread_id: str, run_id: str, owner: str = "alice") -> None:
    await begin(h, thread_id, run_id, [text_msg(f"{run_id}-in")], owner=owner)
    await finish(h, run_id, [text_msg(f"{run_id}-out", REPLY)], owner=owner)


def _code(err: pytest.ExceptionInfo[grpc.aio.AioRpcError]) -> grpc.StatusCode:
    return err.value.code()


async def test_deleting_a_thread_removes_its_messages_and_runs_and_keeps_a_record(
    history: History,
) -> None:
    await _finished_thread(history, "t1", "r1")
    await _finished_thread(history, "t1", "r2")
    await _finished_thread(history, "t2", "r3")

    reply = await history.stub.DeleteThread(
        pb.DeleteThreadRequest(thread_id="t1"), metadata=history.md()
    )

    d = reply.deletion
    assert d.kind == pb.DELETION_KIND_THREAD
    assert d.state == pb.DELETION_STATE_SUCCEEDED
    assert d.thread_id == "t1" and d.requested_by == "alice"
    assert dict(d.steps[0].deleted_counts) == {
        "threads": 1,
        "messages": 4,
        "runs": 2,
        "tool_denials": 0,
    }
    for rpc, request in (
        (history.stub.GetThread, pb.GetThreadRequest(thread_id="t1")),
        (history.stub.GetRun, pb.GetRunRequest(run_id="r1")),
        (history.stub.ListHistory, pb.ListHistoryRequest(thread_id="t1")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rpc(request, metadata=history.md())
        assert _code(err) == grpc.StatusCode.NOT_FOUND
    # The other thread is untouched; the record is readable and holds no content.
    kept = await history.stub.ListHistory(
        pb.ListHistoryRequest(thread_id="t2"), metadata=history.md()
    )
    assert [m.id for m in kept.messages] == ["r3-in", "r3-out"]
    got = await history.stub.GetDeletion(
        pb.GetDeletionRequest(deletion_id=d.id), metadata=history.md()
    )
    assert got.deletion == d
    assert "r1-in" not in str(got.deletion)


async def test_a_thread_with_a_run_in_flight_is_not_deleted(history: History) -> None:
    await begin(history, "busy", "r-live", [text_msg("m-live")])
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await history.stub.DeleteThread(
            pb.DeleteThreadRequest(thread_id="busy"), metadata=history.md()
        )
    assert _code(err) == grpc.StatusCode.FAILED_PRECONDITION
    assert "r-live" in (err.value.details() or "")
    # Nothing was deleted: the run can still finish into its thread.
    await finish(history, "r-live", [text_msg("m-live-out", REPLY)])
    page = await history.stub.ListHistory(
        pb.ListHistoryRequest(thread_id="busy"), metadata=history.md()
    )
    assert [m.id for m in page.messages] == ["m-live", "m-live-out"]


async def test_thread_deletion_is_scoped_to_the_caller(history: History) -> None:
    await _finished_thread(history, "shared-id", "r-a", owner="alice")
    await _finished_thread(history, "shared-id", "r-b", owner="bob")
    done = await history.stub.DeleteThread(
        pb.DeleteThreadRequest(thread_id="shared-id"), metadata=history.md("bob")
    )
    page = await history.stub.ListHistory(
        pb.ListHistoryRequest(thread_id="shared-id"), metadata=history.md("alice")
    )
    assert [m.id for m in page.messages] == ["r-a-in", "r-a-out"]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await history.stub.GetDeletion(
            pb.GetDeletionRequest(deletion_id=done.deletion.id), metadata=history.md("alice")
        )
    assert _code(err) == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await history.stub.DeleteThread(
            pb.DeleteThreadRequest(thread_id="shared-id"), metadata=history.md("bob")
        )
    assert _code(err) == grpc.StatusCode.NOT_FOUND


async def test_owner_data_waits_for_runs_in_flight_then_goes(history: History) -> None:
    await _finished_thread(history, "t1", "r1")
    await begin(history, "t2", "r-live", [text_msg("m-live"), tool_call_msg("m-call", "c1")])
    await _finished_thread(history, "t3", "r-bob", owner="bob")

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await history.stub.DeleteOwnerData(pb.DeleteOwnerDataRequest(), metadata=history.md())
    assert _code(err) == grpc.StatusCode.FAILED_PRECONDITION
    run = await history.stub.GetRun(pb.GetRunRequest(run_id="r-live"), metadata=history.md())
    assert run.run.cancel_requested  # its holder stops it at its next lease renewal

    await finish(history, "r-live", [], state=pb.RUN_STATE_CANCELLED)
    gone = await history.stub.DeleteOwnerData(pb.DeleteOwnerDataRequest(), metadata=history.md())
    assert dict(gone.deleted_counts) == {
        "threads": 2,
        "messages": 4,
        "runs": 2,
        "tool_denials": 0,
        "webhookEvents": 2,
        "usageEntries": 2,
        "interrupt_answers": 0,
        "owner_sequences": 1,
    }
    again = await history.stub.DeleteOwnerData(pb.DeleteOwnerDataRequest(), metadata=history.md())
    assert set(again.deleted_counts.values()) == {0}
    listed = await history.stub.ListThreads(pb.ListThreadsRequest(), metadata=history.md())
    assert list(listed.threads) == []
    bobs = await history.stub.ListThreads(pb.ListThreadsRequest(), metadata=history.md("bob"))
    assert [t.id for t in bobs.threads] == ["t3"]


async def test_an_owner_deletion_records_its_steps_in_order_until_it_succeeds(
    history: History,
) -> None:
    md = history.md()
    started = await history.stub.StartOwnerDeletion(pb.StartOwnerDeletionRequest(), metadata=md)
    assert started.created
    d = started.deletion
    assert [s.service for s in d.steps] == [
        "scheduler",
        "memory",
        "history",
        "orchestrator",
        "gateway",
    ]
    assert d.state == pb.DELETION_STATE_RUNNING

    # A second request while it runs gets the same deletion (one job per owner).
    same = await history.stub.StartOwnerDeletion(pb.StartOwnerDeletionRequest(), metadata=md)
    assert not same.created and same.deletion.id == d.id

    step = pb.RecordDeletionStepRequest
    await history.stub.RecordDeletionStep(
        step(deletion_id=d.id, service="scheduler", done=True, deleted_counts={"jobs": 1}),
        metadata=md,
    )
    down = await history.stub.RecordDeletionStep(
        step(deletion_id=d.id, service="memory", error="UNAVAILABLE: memory is down"), metadata=md
    )
    memory = down.deletion.steps[1]
    assert (memory.done, memory.attempts, memory.last_error) == (
        False,
        1,
        "UNAVAILABLE: memory is down",
    )
    await history.stub.RecordDeletionStep(
        step(deletion_id=d.id, service="memory", done=True, deleted_counts={"memories": 2}),
        metadata=md,
    )
    # A retried record of a step already done keeps the first counts.
    await history.stub.RecordDeletionStep(
        step(deletion_id=d.id, service="memory", done=True, deleted_counts={"memories": 0}),
        metadata=md,
    )
    last = await history.stub.RecordDeletionStep(
        step(deletion_id=d.id, service="history", done=True, deleted_counts={"threads": 3}),
        metadata=md,
    )
    assert last.deletion.state == pb.DELETION_STATE_RUNNING
    await history.stub.RecordDeletionStep(
        step(deletion_id=d.id, service="orchestrator", done=True), metadata=md
    )
    last = await history.stub.RecordDeletionStep(
        step(deletion_id=d.id, service="gateway", done=True), metadata=md
    )
    final = last.deletion
    assert final.state == pb.DELETION_STATE_SUCCEEDED and final.HasField("finish_time")
    assert [(s.service, s.done, dict(s.deleted_counts)) for s in final.steps] == [
        ("scheduler", True, {"jobs": 1}),
        ("memory", True, {"memories": 2}),
        ("history", True, {"threads": 3}),
        ("orchestrator", True, {}),
        ("gateway", True, {}),
    ]
    assert final.steps[1].attempts == 2 and not final.steps[1].last_error
    # Finished: the next request starts a new deletion.
    fresh = await history.stub.StartOwnerDeletion(pb.StartOwnerDeletionRequest(), metadata=md)
    assert fresh.created and fresh.deletion.id != d.id


async def test_unfinished_deletions_are_listed_for_admins_only(history: History) -> None:
    started = await history.stub.StartOwnerDeletion(
        pb.StartOwnerDeletionRequest(), metadata=history.md("carol")
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await history.stub.ListUnfinishedDeletions(
            pb.ListUnfinishedDeletionsRequest(), metadata=history.md("carol")
        )
    assert _code(err) == grpc.StatusCode.PERMISSION_DENIED
    listed = await history.stub.ListUnfinishedDeletions(
        pb.ListUnfinishedDeletionsRequest(), metadata=history.md("ops", admin=True)
    )
    assert started.deletion.id in [d.id for d in listed.deletions]


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.RecordDeletionStepRequest(deletion_id="", service="memory"), "deletion_id"),
        (pb.RecordDeletionStepRequest(deletion_id="del_x", service="nope"), None),
        (pb.StartOwnerDeletionRequest(requested_by="admin:"), "requested_by"),
        (pb.StartOwnerDeletionRequest(requested_by="someone-else"), "requested_by"),
    ],
)
async def test_bad_deletion_requests_are_refused_naming_the_field(
    history: History, request_: object, field: str | None
) -> None:
    rpc = (
        history.stub.RecordDeletionStep
        if isinstance(request_, pb.RecordDeletionStepRequest)
        else history.stub.StartOwnerDeletion
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rpc(request_, metadata=history.md())
    # An unknown deletion id is NOT_FOUND before the service name is looked at.
    expected = grpc.StatusCode.INVALID_ARGUMENT if field else grpc.StatusCode.NOT_FOUND
    assert _code(err) == expected
    if field:
        assert field in (err.value.details() or "")


async def test_the_admin_requester_needs_the_admin_scope(history: History) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await history.stub.StartOwnerDeletion(
            pb.StartOwnerDeletionRequest(requested_by="admin:mallory"), metadata=history.md()
        )
    assert _code(err) == grpc.StatusCode.PERMISSION_DENIED


async def test_retention_deletes_threads_not_updated_for_the_configured_days(
    settings: Settings,
) -> None:
    clock = Clock(datetime(2025, 6, 1, tzinfo=UTC))
    configured = settings.model_copy(
        update={"thread_retention_days": 30, "lifecycle_sweep_seconds": 0.05}
    )
    builder = functools.partial(build, clock=clock)
    async with running_service("history", builder, configured) as addr, channel(addr) as ch:
        h = History(pb_grpc.HistoryServiceStub(ch), clock)
        await _finished_thread(h, "old", "r-old")
        await _finished_thread(h, "old-bob", "r-old-bob", owner="bob")
        clock.advance(days=20)
        await _finished_thread(h, "recent", "r-recent")
        clock.advance(days=11)  # "old" is 31 days old, "recent" 11
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            alices = await h.stub.ListThreads(pb.ListThreadsRequest(), metadata=h.md())
            bobs = await h.stub.ListThreads(pb.ListThreadsRequest(), metadata=h.md("bob"))
            if len(alices.threads) == 1 and not bobs.threads:
                break
            await asyncio.sleep(0.05)
        assert [t.id for t in alices.threads] == ["recent"]
        assert list(bobs.threads) == []
        records = await h.stub.ListDeletions(pb.ListDeletionsRequest(), metadata=h.md())
        [record] = records.deletions
        assert (record.kind, record.thread_id, record.requested_by) == (
            pb.DELETION_KIND_RETENTION,
            "old",
            "retention",
        )


async def test_deletion_records_are_listed_newest_first_page_by_page_per_owner(
    history: History,
) -> None:
    ids = []
    for n in range(3):
        await _finished_thread(history, f"t{n}", f"r{n}")
        history.clock.advance(seconds=1)
        done = await history.stub.DeleteThread(
            pb.DeleteThreadRequest(thread_id=f"t{n}"), metadata=history.md()
        )
        ids.append(done.deletion.id)
    await _finished_thread(history, "t-bob", "r-bob", owner="bob")
    await history.stub.DeleteThread(
        pb.DeleteThreadRequest(thread_id="t-bob"), metadata=history.md("bob")
    )

    first = await history.stub.ListDeletions(
        pb.ListDeletionsRequest(page_size=2), metadata=history.md()
    )
    second = await history.stub.ListDeletions(
        pb.ListDeletionsRequest(page_size=2, page_token=first.next_page_token),
        metadata=history.md(),
    )
    assert [d.id for d in [*first.deletions, *second.deletions]] == ids[::-1]
    assert not second.next_page_token
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await history.stub.ListDeletions(
            pb.ListDeletionsRequest(page_token="forged"), metadata=history.md()
        )
    assert _code(err) == grpc.StatusCode.INVALID_ARGUMENT


async def test_concurrent_owner_deletion_requests_start_one_job(history: History) -> None:
    replies = await asyncio.gather(
        *(
            history.stub.StartOwnerDeletion(
                pb.StartOwnerDeletionRequest(), metadata=history.md("dan")
            )
            for _ in range(6)
        )
    )
    assert len({r.deletion.id for r in replies}) == 1
    assert sum(r.created for r in replies) == 1
