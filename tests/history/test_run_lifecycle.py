"""One active run per thread (double-texting strategies), leases and cancel requests."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
import sqlalchemy as sa
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.type.v1 import message_pb2

from services.history.service import MIGRATIONS
from shared import db
from shared.settings import Settings
from tests.conftest import migrated_engine
from tests.history.conftest import (
    REPLY,
    History,
    chat_profile,
    finish,
    text_msg,
    tool_result_msg,
)
from tests.history.test_service import history_of, rpc_error


async def begin(
    h: History,
    thread_id: str,
    run_id: str,
    mid: str,
    strategy: int = 0,
    *,
    lease: float = 10.0,
    owner: str = "alice",
) -> pb.BeginRunResponse:
    return await h.stub.BeginRun(
        pb.BeginRunRequest(
            thread_id=thread_id,
            runtime_mode=1,
            run_id=run_id,
            profile=chat_profile(),
            input_messages=[text_msg(mid)],
            multitask_strategy=strategy,
            lease_holder="orch-1",
            lease_seconds=lease,
        ),
        metadata=h.md(owner),
    )


async def test_a_run_on_a_busy_thread_is_queued_and_starts_when_the_first_ends(
    history: History,
) -> None:
    first = await begin(history, "t1", "r1", "u1")
    second = await begin(history, "t1", "r2", "u2")
    assert first.run.state == pb.RUN_STATE_RUNNING
    assert second.run.state == pb.RUN_STATE_QUEUED and list(second.run.ahead_run_ids) == ["r1"]
    assert await history_of(history, "t1") == ["u1"]  # a queued run's input waits
    again = await begin(history, "t1", "r2", "u2")
    assert again.run.state == pb.RUN_STATE_QUEUED
    await finish(history, "r1", [text_msg("a1", REPLY)])
    started = await begin(history, "t1", "r2", "u2")
    assert started.run.state == pb.RUN_STATE_RUNNING
    assert [m.id for m in started.context_messages] == ["u1", "a1", "u2"]
    assert await history_of(history, "t1") == ["u1", "a1", "u2"]


async def test_queued_runs_start_in_their_order(history: History) -> None:
    await begin(history, "t1", "r1", "u1")
    await begin(history, "t1", "r2", "u2")
    await begin(history, "t1", "r3", "u3")
    await finish(history, "r1", [])
    assert (await begin(history, "t1", "r3", "u3")).run.state == pb.RUN_STATE_QUEUED
    assert (await begin(history, "t1", "r2", "u2")).run.state == pb.RUN_STATE_RUNNING


async def test_reject_names_the_active_run_and_stores_nothing(history: History) -> None:
    await begin(history, "t1", "r1", "u1")
    err = await rpc_error(begin(history, "t1", "r2", "u2", pb.MULTITASK_STRATEGY_REJECT))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "r1" in (err.details() or "")
    missing = await rpc_error(
        history.stub.GetRun(pb.GetRunRequest(run_id="r2"), metadata=history.md())
    )
    assert missing.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    "strategy", [pb.MULTITASK_STRATEGY_INTERRUPT, pb.MULTITASK_STRATEGY_ROLLBACK]
)
async def test_interrupt_and_rollback_request_the_active_runs_cancel(
    history: History, strategy: int
) -> None:
    await begin(history, "t1", "r1", "u1")
    second = await begin(history, "t1", "r2", "u2", strategy)
    assert second.run.state == pb.RUN_STATE_QUEUED
    record = (await history.stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=history.md())).run
    assert record.cancel_requested
    assert record.rolled_back == (strategy == pb.MULTITASK_STRATEGY_ROLLBACK)


@pytest.mark.parametrize(
    "strategy", [pb.MULTITASK_STRATEGY_INTERRUPT, pb.MULTITASK_STRATEGY_ROLLBACK]
)
async def test_a_run_whose_cancel_was_admitted_first_finishes_cancelled_not_succeeded(
    history: History, strategy: int
) -> None:
    # The active run's steps completed, but an interrupt/rollback run was admitted before
    # its FinishRun: it must not be recorded (and shown) as a success.
    await begin(history, "t1", "r1", "u1")
    await begin(history, "t1", "r2", "u2", strategy)
    finished = await finish(history, "r1", [text_msg("a1", REPLY)])
    assert finished.run.state == pb.RUN_STATE_CANCELLED
    # The same FinishRun again (its reply was lost) is a retry, not a conflict.
    again = await finish(history, "r1", [text_msg("a1", REPLY)])
    assert again.run.state == pb.RUN_STATE_CANCELLED
    rolled_back = strategy == pb.MULTITASK_STRATEGY_ROLLBACK
    assert await history_of(history, "t1") == ([] if rolled_back else ["u1", "a1"])


async def test_a_run_that_finished_before_the_interrupt_stays_succeeded_and_visible(
    history: History,
) -> None:
    await begin(history, "t1", "r1", "u1")
    done = await finish(history, "r1", [text_msg("a1", REPLY)])
    second = await begin(history, "t1", "r2", "u2", pb.MULTITASK_STRATEGY_ROLLBACK)
    assert done.run.state == pb.RUN_STATE_SUCCEEDED
    assert second.run.state == pb.RUN_STATE_RUNNING  # nothing was active to cancel
    record = (await history.stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=history.md())).run
    assert record.state == pb.RUN_STATE_SUCCEEDED and not record.rolled_back
    assert await history_of(history, "t1") == ["u1", "a1", "u2"]


async def test_a_failed_run_stays_failed_when_its_cancel_was_requested(history: History) -> None:
    await begin(history, "t1", "r1", "u1")
    await begin(history, "t1", "r2", "u2", pb.MULTITASK_STRATEGY_INTERRUPT)
    failed = await finish(history, "r1", [], state=pb.RUN_STATE_FAILED)
    assert failed.run.state == pb.RUN_STATE_FAILED


async def test_rollback_hides_the_runs_messages_from_history_and_context_but_not_audit(
    history: History,
) -> None:
    await begin(history, "t1", "r1", "u1")
    await begin(history, "t1", "r2", "u2", pb.MULTITASK_STRATEGY_ROLLBACK)
    await finish(history, "r1", [text_msg("a1", REPLY)], state=pb.RUN_STATE_CANCELLED)
    started = await begin(history, "t1", "r2", "u2")
    assert [m.id for m in started.context_messages] == ["u2"]
    assert await history_of(history, "t1") == ["u2"]
    audit = await history.stub.ListAudit(
        pb.ListAuditRequest(owner_id="alice"), metadata=history.md(admin=True)
    )
    masks = {m.id: m.visibility_mask for m in audit.messages}
    assert masks["u1"] == 0 and masks["a1"] == 0 and masks["u2"] == 3


async def test_lease_renewal_returns_cancel_requests_and_an_expired_lease_fails_the_run(
    history: History,
) -> None:
    await begin(history, "t1", "r1", "u1", lease=5)
    await history.stub.RequestRunCancellation(
        pb.RequestRunCancellationRequest(run_id="r1"), metadata=history.md()
    )
    renewed = await history.stub.RenewRunLease(
        pb.RenewRunLeaseRequest(run_id="r1", lease_holder="orch-1", lease_seconds=5),
        metadata=history.md(),
    )
    assert renewed.held and renewed.run.cancel_requested
    none = await history.stub.ExpireRunLeases(
        pb.ExpireRunLeasesRequest(), metadata=history.md("sweeper", admin=True)
    )
    assert list(none.runs) == []
    history.clock.advance(seconds=6)
    expired = await history.stub.ExpireRunLeases(
        pb.ExpireRunLeasesRequest(), metadata=history.md("sweeper", admin=True)
    )
    assert [(r.id, r.owner_id, r.error_code) for r in expired.runs] == [
        ("r1", "alice", "LEASE_EXPIRED")
    ]
    lost = await history.stub.RenewRunLease(
        pb.RenewRunLeaseRequest(run_id="r1", lease_holder="orch-1", lease_seconds=5),
        metadata=history.md(),
    )
    assert not lost.held and lost.run.state == pb.RUN_STATE_FAILED
    assert await history_of(history, "t1") == ["u1"]  # the user message stays


async def test_expire_run_leases_needs_the_admin_scope(history: History) -> None:
    err = await rpc_error(
        history.stub.ExpireRunLeases(pb.ExpireRunLeasesRequest(), metadata=history.md())
    )
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_finish_run_waits_for_the_thread_before_it_holds_the_run(
    history: History, settings: Settings
) -> None:
    """FinishRun takes the thread's lock, then the run's, as BeginRun does (one statement on
    PostgreSQL): while another transaction holds the thread, a waiting FinishRun holds
    nothing of the run, so the two can never deadlock; once the thread is free it finishes."""
    await begin(history, "t1", "r1", "m1")
    async with migrated_engine(settings, "history", MIGRATIONS) as engine:
        async with engine.connect() as holder:
            await holder.begin()
            await holder.execute(
                sa.text(
                    "UPDATE threads SET message_count = message_count "
                    "WHERE owner_id = 'alice' AND id = 't1'"
                )
            )
            finishing = asyncio.create_task(finish(history, "r1", [text_msg("a1", REPLY)]))
            await asyncio.sleep(0.5)
            assert not finishing.done()  # it waits for the thread
            if db.is_postgres(engine):
                # The run is not locked by the waiting FinishRun (SQLite has one lock for
                # every writer, so there the question does not arise).
                async with engine.connect() as other, other.begin():
                    await other.execute(
                        sa.text(
                            "SELECT 1 FROM runs WHERE owner_id = 'alice' AND id = 'r1' "
                            "FOR UPDATE NOWAIT"
                        )
                    )
            await holder.rollback()
            finished = await asyncio.wait_for(finishing, 10)
    assert finished.run.state == pb.RUN_STATE_SUCCEEDED
    assert await history_of(history, "t1") == ["m1", "a1"]


def _usage(input_tokens: int, output_tokens: int, estimated: bool = False) -> message_pb2.Usage:
    return message_pb2.Usage(
        input_tokens=input_tokens, output_tokens=output_tokens, estimated=estimated
    )


async def test_a_finished_run_records_the_sum_of_its_messages_usage(history: History) -> None:
    await begin(history, "t1", "r1", "u1")
    running = await history.stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=history.md())
    assert not running.run.HasField("usage")  # nothing recorded while it runs
    await finish(
        history,
        "r1",
        [
            text_msg("a1", REPLY, usage=_usage(100, 7)),
            text_msg("a2", REPLY, usage=_usage(120, 5, estimated=True)),
            text_msg("a3", REPLY),
        ],
    )
    record = (await history.stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=history.md())).run
    assert (record.usage.input_tokens, record.usage.output_tokens) == (220, 12)
    assert record.usage.estimated  # one of its model calls was counted by agentmesh
    # Another owner sees no such run, usage or not.
    other = await rpc_error(
        history.stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=history.md("bob"))
    )
    assert other.code() == grpc.StatusCode.NOT_FOUND


async def test_a_run_whose_endpoint_reported_usage_is_not_estimated(history: History) -> None:
    await begin(history, "t1", "r1", "u1")
    done = await finish(history, "r1", [text_msg("a1", REPLY, usage=_usage(30, 4))])
    assert (done.run.usage.input_tokens, done.run.usage.output_tokens) == (30, 4)
    assert not done.run.usage.estimated
    await begin(history, "t2", "r2", "u2")
    failed = await finish(
        history, "r2", [text_msg("a2", REPLY, usage=_usage(9, 2, True))], state=pb.RUN_STATE_FAILED
    )
    assert failed.run.usage.output_tokens == 2 and failed.run.usage.estimated


async def test_a_run_without_usage_shows_none_and_negative_counts_are_refused(
    history: History,
) -> None:
    await begin(history, "t1", "r1", "u1")
    err = await rpc_error(finish(history, "r1", [text_msg("a1", REPLY, usage=_usage(-1, 3))]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "output_messages[0].usage" in (err.details() or "")
    record = (await history.stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=history.md())).run
    assert record.state == pb.RUN_STATE_RUNNING  # the refused finish changed nothing
    done = await finish(history, "r1", [text_msg("a1", REPLY)])
    assert done.run.state == pb.RUN_STATE_SUCCEEDED and not done.run.HasField("usage")


async def begin_answering(
    h: History, run_id: str, mid: str, answers: list[str], *, thread_id: str = "t1"
) -> pb.BeginRunResponse:
    return await h.stub.BeginRun(
        pb.BeginRunRequest(
            thread_id=thread_id,
            runtime_mode=1,
            run_id=run_id,
            profile=chat_profile(),
            input_messages=[text_msg(mid)],
            lease_holder="orch-1",
            lease_seconds=10.0,
            answered_interrupt_ids=answers,
        ),
        metadata=h.md(),
    )


async def test_an_approval_is_answered_by_one_run_the_other_is_refused_storing_nothing(
    history: History,
) -> None:
    await begin(history, "t1", "r1", "u1")
    await finish(history, "r1", [text_msg("a1", REPLY)])
    first = await begin_answering(history, "r2", "u2", ["call_1"])
    assert first.run.state == pb.RUN_STATE_RUNNING
    err = await rpc_error(begin_answering(history, "r3", "u3", ["call_2", "call_1"]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "answered_interrupt_ids[1]" in (err.details() or "")
    missing = await rpc_error(
        history.stub.GetRun(pb.GetRunRequest(run_id="r3"), metadata=history.md())
    )
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    assert await history_of(history, "t1") == ["u1", "a1", "u2"]
    # Its own run begun again (a retry, or a queued run asking for its turn) keeps them.
    again = await begin_answering(history, "r2", "u2", ["call_1"])
    assert again.run.state == pb.RUN_STATE_RUNNING
    # call_2 was not taken by the refused run: another run may answer it.
    await finish(history, "r2", [])
    assert (await begin_answering(history, "r4", "u4", ["call_2"])).run.state == (
        pb.RUN_STATE_RUNNING
    )


@pytest.mark.parametrize("strategy", [0, 1, 2, 3, 4])
async def test_a_run_answering_approvals_while_another_is_in_progress_is_refused_storing_nothing(
    history: History, strategy: int
) -> None:
    """The run in progress settles the thread's waiting approvals itself when it ends (its
    output records them answered or unanswered): a resume queued behind it, or cancelling
    it, would find its answer already given. Refused whatever the strategy, nothing stored."""
    await begin(history, "t1", "r1", "u1")
    err = await rpc_error(
        history.stub.BeginRun(
            pb.BeginRunRequest(
                thread_id="t1",
                runtime_mode=1,
                run_id="r2",
                profile=chat_profile(),
                input_messages=[text_msg("u2")],
                multitask_strategy=strategy,  # type: ignore[arg-type]
                lease_holder="orch-1",
                lease_seconds=10.0,
                answered_interrupt_ids=["call_1"],
            ),
            metadata=history.md(),
        )
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "answered_interrupt_ids[0]" in (err.details() or "")
    assert "run in progress (r1)" in (err.details() or "")
    missing = await rpc_error(
        history.stub.GetRun(pb.GetRunRequest(run_id="r2"), metadata=history.md())
    )
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    running = await history.stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=history.md())
    assert running.run.state == pb.RUN_STATE_RUNNING and not running.run.cancel_requested
    # Nothing was taken: once r1 ended, a run may answer it.
    await finish(history, "r1", [text_msg("a1", REPLY)])
    assert (await begin_answering(history, "r3", "u3", ["call_1"])).run.state == (
        pb.RUN_STATE_RUNNING
    )
    assert await history_of(history, "t1") == ["u1", "a1", "u3"]


async def test_the_approval_a_run_took_is_named_answered_while_that_run_is_in_progress(
    history: History,
) -> None:
    await begin_answering(history, "r1", "u1", ["call_1"])
    err = await rpc_error(begin_answering(history, "r2", "u2", ["call_1"]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "answered already" in (err.details() or "")


def settled_result(mid: str, call_id: str, decision: str) -> message_pb2.Message:
    """The worker's result of a decided call: metadata approvals, one record per call."""
    record = {"toolCallId": call_id, "toolName": "lookup", "decision": decision}
    msg = tool_result_msg(mid, call_id, f"not executed: {decision}")
    msg.metadata.extra_json = json.dumps({"approvals": [record]})
    return msg


async def test_an_approval_a_runs_output_settled_cannot_be_answered_again(
    history: History,
) -> None:
    """A run without a resume records the thread's waiting approvals `unanswered` in its
    output; a resume checked before that output was stored is refused when it is admitted
    (it was 200, and its answer silently dropped)."""
    await begin(history, "t1", "r1", "u1")
    await finish(history, "r1", [settled_result("res1", "call_1", "unanswered")])
    err = await rpc_error(begin_answering(history, "r2", "u2", ["call_1"]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "answered_interrupt_ids[0]" in (err.details() or "")
    assert await history_of(history, "t1") == ["u1", "res1"]
    # Its own answers are kept once: a run that took call_2 and settles it ends as usual.
    await begin_answering(history, "r3", "u3", ["call_2"])
    await finish(history, "r3", [settled_result("res2", "call_2", "approve")])
    again = await rpc_error(begin_answering(history, "r4", "u4", ["call_2"]))
    assert again.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_concurrent_runs_answering_one_approval_admit_one(history: History) -> None:
    await begin(history, "t1", "r0", "u0")
    await finish(history, "r0", [])
    n = 8
    results = await asyncio.gather(
        *(begin_answering(history, f"r{i}", f"u{i}", ["call_1"]) for i in range(1, n + 1)),
        return_exceptions=True,
    )
    admitted = [r for r in results if isinstance(r, pb.BeginRunResponse)]
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(admitted) == 1 and len(refused) == n - 1, results
    assert all(e.code() == grpc.StatusCode.INVALID_ARGUMENT for e in refused)
    assert len(await history_of(history, "t1")) == 2  # u0 and the admitted run's input


async def test_the_approvals_a_run_took_go_with_its_thread(history: History) -> None:
    await begin_answering(history, "r1", "u1", ["call_1"])
    await finish(history, "r1", [])
    await history.stub.DeleteThread(pb.DeleteThreadRequest(thread_id="t1"), metadata=history.md())
    # The thread id used again is a new thread: nothing of the old one is answered.
    assert (await begin_answering(history, "r2", "u2", ["call_1"])).run.state == (
        pb.RUN_STATE_RUNNING
    )
