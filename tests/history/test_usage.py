"""GetOwnerUsage: an owner's runs summed per UTC day from the run records (runs, failed
and automation runs, tokens, duration), owner-scoped, with its days checked."""

from __future__ import annotations

import grpc
import pytest
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.type.v1 import message_pb2

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
