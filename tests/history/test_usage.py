"""GetOwnerUsage: an owner's runs summed per UTC day (runs, failed and automation runs,
tokens, duration), owner-scoped, with its days checked; from the usage ledger, which a thread
or owner deletion does not reduce."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import grpc
import pytest
import sqlalchemy as sa
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.type.v1 import message_pb2

from services.history import store
from services.history.core import Run, RunState
from services.history.service import MIGRATIONS
from shared.domain import RuntimeMode
from shared.profiles import CHAT_DEFAULT
from shared.settings import Settings
from tests.conftest import migrated_engine
from tests.history.conftest import AUTOMATION, REPLY, History, begin, finish, text_msg


def reply(mid: str, inp: int, out: int, *, estimated: bool = False) -> message_pb2.Message:
    usage = message_pb2.Usage(input_tokens=inp, output_tokens=out, estimated=estimated)
    return text_msg(mid, REPLY, usage=usage)


async def usage(h: History, first: str, last: str, owner: str = "alice") -> list[pb.OwnerUsageDay]:
    resp = await h.stub.GetOwnerUsage(
        pb.GetOwnerUsageRequest(from_day=first, to_day=last), metadata=h.md(owner)
    )
    return list(resp.days)


async def test_usage_sums_each_utc_days_runs_tokens_and_duration(history: History) -> None:
    # The clock starts at 2025-06-10 04:00 UTC.
    await begin(history, "t1", "r1", [text_msg("u1")])
    history.clock.advance(seconds=2)
    await finish(history, "r1", [reply("a1", 10, 5)])
    await begin(history, "t1", "r2", [text_msg("u2")])
    history.clock.advance(seconds=1, milliseconds=500)
    await finish(history, "r2", [reply("a2", 7, 3, estimated=True)], state=pb.RUN_STATE_FAILED)
    history.clock.advance(days=1)
    await begin(history, "job-1", "r3", [text_msg("in")], mode=AUTOMATION)
    history.clock.advance(seconds=1)
    await finish(history, "r3", [reply("out", 100, 20)])
    await begin(history, "t1", "r4", [text_msg("u4")])  # still running: counted, no tokens

    days = await usage(history, "2025-06-09", "2025-06-11")
    assert [d.day for d in days] == ["2025-06-10", "2025-06-11"]
    first, second = days
    assert (first.runs, first.failed_runs, first.automation_runs) == (2, 1, 0)
    assert (first.input_tokens, first.output_tokens) == (17, 8)
    assert first.duration_ms == 3500
    assert first.tokens_estimated
    assert (second.runs, second.failed_runs, second.automation_runs) == (2, 0, 1)
    assert (second.input_tokens, second.output_tokens, second.duration_ms) == (100, 20, 1000)
    assert not second.tokens_estimated
    assert [d.day for d in await usage(history, "2025-06-11", "2025-06-11")] == ["2025-06-11"]


async def test_usage_is_the_callers_own(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    await finish(history, "r1", [reply("a1", 10, 5)])
    assert await usage(history, "2025-06-10", "2025-06-10", owner="bob") == []
    assert len(await usage(history, "2025-06-10", "2025-06-10")) == 1


@pytest.mark.parametrize(
    ("first", "last", "field"),
    [
        ("", "2025-06-10", "from_day"),
        ("2025-6-1", "2025-06-10", "from_day"),
        ("2025-06-10", "June", "to_day"),
        ("2025-06-10", "2025-06-09", "to_day"),
        ("2024-06-09", "2025-06-10", "to_day"),  # 367 days
    ],
)
async def test_usage_with_bad_days_is_invalid_naming_the_field(
    history: History, first: str, last: str, field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await usage(history, first, last)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (err.value.details() or "")


# --- the usage ledger (issue 33) -----------------------------------------------------------


async def _today(h: History, owner: str = "alice") -> pb.OwnerUsageDay:
    (day,) = await usage(h, "2025-06-10", "2025-06-10", owner)
    return day


async def _ledger_rows(settings: Settings, owner: str) -> list[tuple[object, ...]]:
    async with migrated_engine(settings, "history", MIGRATIONS) as engine:
        async with engine.connect() as conn:
            found = await conn.execute(
                sa.text(
                    "SELECT * FROM usage_ledger WHERE owner_id = :o "
                    "UNION ALL SELECT owner_id, day, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
                    "NULL FROM usage_totals WHERE owner_id = :o"
                ),
                {"o": owner},
            )
            return [tuple(r) for r in found.all()]


async def test_deleting_a_thread_does_not_reduce_the_owners_usage(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    await finish(history, "r1", [reply("a1", 300, 40)])
    await begin(history, "t2", "r2", [text_msg("u2")])
    await finish(history, "r2", [reply("a2", 7, 3)], state=pb.RUN_STATE_FAILED)

    for thread in ("t1", "t2"):
        await history.stub.DeleteThread(
            pb.DeleteThreadRequest(thread_id=thread), metadata=history.md()
        )

    day = await _today(history)
    assert (day.runs, day.failed_runs, day.input_tokens, day.output_tokens) == (2, 1, 307, 43)


async def test_a_run_is_in_the_ledger_once_however_often_its_end_is_sent(
    history: History,
) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    await finish(history, "r1", [reply("a1", 10, 5)], state=pb.RUN_STATE_CANCELLED)
    # The orchestrator's retry of the same end (its first answer was lost).
    await finish(history, "r1", [reply("a1", 10, 5)], state=pb.RUN_STATE_CANCELLED)

    day = await _today(history)
    assert (day.runs, day.input_tokens, day.output_tokens) == (1, 10, 5)


async def test_a_run_whose_lease_expired_is_in_the_ledger(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    history.clock.advance(hours=1)
    await history.stub.ExpireRunLeases(
        pb.ExpireRunLeasesRequest(), metadata=history.md("sweeper", admin=True)
    )
    await history.stub.DeleteThread(pb.DeleteThreadRequest(thread_id="t1"), metadata=history.md())

    day = await _today(history)
    assert (day.runs, day.failed_runs) == (1, 1)


async def test_an_owner_deletion_keeps_only_the_owners_sums_per_day(
    history: History, settings: Settings
) -> None:
    await begin(history, "t1", "r-secret-1", [text_msg("u1")])
    await finish(history, "r-secret-1", [reply("a1", 100, 20, estimated=True)])
    await begin(history, "job-1", "r-secret-2", [text_msg("u2")], mode=AUTOMATION)
    await finish(history, "r-secret-2", [reply("a2", 50, 5)], state=pb.RUN_STATE_FAILED)
    history.clock.advance(days=1)
    await begin(history, "t1", "r-secret-3", [text_msg("u3")])
    await finish(history, "r-secret-3", [reply("a3", 1, 1)])
    await begin(history, "t9", "r-bob", [text_msg("b1")], owner="bob")
    await finish(history, "r-bob", [reply("b2", 9, 9)], owner="bob")
    before = await usage(history, "2025-06-10", "2025-06-11")

    gone = await history.stub.DeleteOwnerData(pb.DeleteOwnerDataRequest(), metadata=history.md())

    assert gone.deleted_counts["usageEntries"] == 3
    assert await usage(history, "2025-06-10", "2025-06-11") == before
    kept = await _ledger_rows(settings, "alice")
    # Two rows, one per day, holding no run id (nor anything else of the runs).
    assert sorted(r[:2] for r in kept) == [("alice", "2025-06-10"), ("alice", "2025-06-11")]
    assert not any("r-secret" in str(v) for r in kept for v in r)
    assert [d.input_tokens for d in await usage(history, "2025-06-11", "2025-06-11", "bob")] == [9]


async def test_an_owner_id_deleted_twice_keeps_both_deletions_sums(history: History) -> None:
    for run in ("r1", "r2"):
        await begin(history, f"t-{run}", run, [text_msg(f"u-{run}")])
        await finish(history, run, [reply(f"a-{run}", 10, 1)])
        await history.stub.DeleteOwnerData(pb.DeleteOwnerDataRequest(), metadata=history.md())

    day = await _today(history)
    assert (day.runs, day.input_tokens, day.output_tokens) == (2, 20, 2)


async def test_the_usage_of_a_turn_cut_short_is_in_the_run_and_the_ledger(
    history: History,
) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    cut = message_pb2.Usage(input_tokens=400, output_tokens=6, estimated=True)
    finished = await history.stub.FinishRun(
        pb.FinishRunRequest(
            run_id="r1",
            state=pb.RUN_STATE_CANCELLED,
            output_messages=[reply("a1", 10, 5)],
            unstored_usage=cut,
        ),
        metadata=history.md(),
    )
    u = finished.run.usage
    assert (u.input_tokens, u.output_tokens, u.estimated) == (410, 11, True)
    day = await _today(history)
    assert (day.input_tokens, day.output_tokens, day.tokens_estimated) == (410, 11, True)


async def test_a_negative_unstored_usage_is_invalid_naming_it(history: History) -> None:
    await begin(history, "t1", "r1", [text_msg("u1")])
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await history.stub.FinishRun(
            pb.FinishRunRequest(
                run_id="r1",
                state=pb.RUN_STATE_FAILED,
                unstored_usage=message_pb2.Usage(input_tokens=-1),
            ),
            metadata=history.md(),
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unstored_usage" in (err.value.details() or "")
    run = await history.stub.GetRun(pb.GetRunRequest(run_id="r1"), metadata=history.md())
    assert run.run.state == pb.RUN_STATE_RUNNING  # nothing stored


async def test_entering_a_run_twice_keeps_its_first_entry(settings: Settings) -> None:
    when = datetime(2025, 6, 10, 4, 0, tzinfo=UTC)
    run = Run(
        owner_id="alice",
        id="r1",
        thread_id="t1",
        state=RunState.CANCELLED,
        origin=RuntimeMode.CHAT,
        profile=CHAT_DEFAULT,
        create_time=when,
        start_time=when,
        finish_time=when,
        input_tokens=10,
        output_tokens=5,
    )
    async with migrated_engine(settings, "history", MIGRATIONS) as engine:
        async with engine.begin() as conn:
            await store.record_usage(conn, [run], when)
            await store.record_usage(conn, [replace(run, input_tokens=999)], when)
            [day] = await store.owner_usage(conn, "alice", when, when + timedelta(days=1))
    assert (day.runs, day.input_tokens, day.output_tokens) == (1, 10, 5)
