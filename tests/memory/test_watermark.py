"""The per-owner watermark: get, and compare-and-set advance."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import grpc
from google.protobuf import timestamp_pb2

from tests.memory.conftest import rpc_error


async def test_a_never_advanced_watermark_has_an_empty_position(client) -> None:
    watermark = await client("alice").watermark()
    assert (watermark.name, watermark.position) == ("memory_agent", "")
    assert not watermark.HasField("time") and not watermark.HasField("update_time")


async def test_advance_from_empty_then_from_the_position_read(client) -> None:
    alice = client("alice")
    when = timestamp_pb2.Timestamp()
    when.FromDatetime(datetime(2026, 3, 1, 9, 30, tzinfo=UTC))
    first = await alice.advance("", '{"message_id": "m1"}', time=when)
    assert first.position == '{"message_id": "m1"}' and first.time == when
    second = await alice.advance(first.position, '{"message_id": "m2"}')
    assert second.position == '{"message_id": "m2"}'
    assert await alice.watermark() == second


async def test_advance_from_a_stale_position_is_aborted(client) -> None:
    alice = client("alice")
    await alice.advance("", "p1")
    await alice.advance("p1", "p2")
    error = await rpc_error(alice.advance("p1", "p3"))
    assert error.code == grpc.StatusCode.ABORTED
    assert (await alice.watermark()).position == "p2"


async def test_advance_from_empty_when_already_advanced_is_aborted(client) -> None:
    alice = client("alice")
    await alice.advance("", "p1")
    error = await rpc_error(alice.advance("", "p2"))
    assert error.code == grpc.StatusCode.ABORTED
    assert (await alice.watermark()).position == "p1"


async def test_of_concurrent_advances_from_one_position_exactly_one_wins(client) -> None:
    alice = client("alice")
    for expected in ("", "winner-of-round-0"):
        results = await asyncio.gather(
            *(alice.advance(expected, f"candidate-{i}") for i in range(10)),
            return_exceptions=True,
        )
        wins = [r for r in results if not isinstance(r, BaseException)]
        losses = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert len(wins) == 1 and len(losses) == 9
        assert all(e.code() == grpc.StatusCode.ABORTED for e in losses)
        assert (await alice.watermark()).position == wins[0].position
        await alice.advance(wins[0].position, "winner-of-round-0")


async def test_named_watermarks_are_independent(client) -> None:
    alice = client("alice")
    await alice.advance("", "memory-1")
    await alice.advance("", "summary-1", name="summary_agent")
    assert (await alice.watermark()).position == "memory-1"
    assert (await alice.watermark("memory_agent")).position == "memory-1"
    assert (await alice.watermark("summary_agent")).position == "summary-1"


async def test_advance_without_a_position_is_invalid_argument(client) -> None:
    error = await rpc_error(client("alice").advance("", ""))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "position"


async def test_a_bad_watermark_name_is_invalid_argument(client) -> None:
    error = await rpc_error(client("alice").watermark("Bad Name"))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "name"
