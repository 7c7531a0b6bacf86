"""A running history service with a clock the test moves, and message builders."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.history.v1 import history_service_pb2_grpc as pb_grpc
from agentmesh.type.v1 import content_pb2, message_pb2

from services.history.service import build
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, CHAT_DEFAULT, profile_to_pb
from shared.settings import Settings
from tests.grpc_helpers import channel, owner_md, running_service

CHAT = message_pb2.RUNTIME_MODE_CHAT
AUTOMATION = message_pb2.RUNTIME_MODE_AUTOMATION
USER = message_pb2.MESSAGE_KIND_USER_MESSAGE
REPLY = message_pb2.MESSAGE_KIND_AGENT_REPLY
TOOL_CALL = message_pb2.MESSAGE_KIND_TOOL_CALL
TOOL_RESULT = message_pb2.MESSAGE_KIND_TOOL_RESULT


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class History:
    stub: pb_grpc.HistoryServiceStub
    clock: Clock

    def md(self, owner: str = "alice", *, admin: bool = False) -> tuple[tuple[str, str], ...]:
        return owner_md(owner, admin=admin)


@pytest.fixture
async def history(settings: Settings) -> AsyncIterator[History]:
    clock = Clock(datetime(2025, 6, 10, 4, 0, tzinfo=UTC))
    async with running_service("history", functools.partial(build, clock=clock), settings) as addr:
        async with channel(addr) as ch:
            yield History(pb_grpc.HistoryServiceStub(ch), clock)


def text_msg(
    mid: str, kind: int = USER, text: str | None = None, **fields: object
) -> message_pb2.Message:
    role = message_pb2.ROLE_USER if kind == USER else message_pb2.ROLE_ASSISTANT
    return message_pb2.Message(
        id=mid,
        role=role,
        # Kinds and fields given as plain values; the constructor checks them.
        kind=kind,  # type: ignore[arg-type]
        content=[content_pb2.ContentBlock(text=content_pb2.TextBlock(text=text or mid))],
        # (as above)
        **fields,  # type: ignore[arg-type]
    )


def tool_call_msg(mid: str, call_id: str, args: str = "{}") -> message_pb2.Message:
    return message_pb2.Message(
        id=mid,
        role=message_pb2.ROLE_ASSISTANT,
        kind=TOOL_CALL,
        content=[
            content_pb2.ContentBlock(
                tool_call=content_pb2.ToolCallBlock(id=call_id, name="lookup", input=args)
            )
        ],
    )


def tool_result_msg(mid: str, call_id: str, output: str = "ok") -> message_pb2.Message:
    return message_pb2.Message(
        id=mid,
        role=message_pb2.ROLE_SYSTEM,
        kind=TOOL_RESULT,
        content=[
            content_pb2.ContentBlock(
                tool_result=content_pb2.ToolResultBlock(id=call_id, name="lookup", text=output)
            )
        ],
    )


def chat_profile() -> object:
    return profile_to_pb(CHAT_DEFAULT)


def automation_profile() -> object:
    return profile_to_pb(AUTOMATION_MEMORY_DEFAULT)


async def begin(
    h: History,
    thread_id: str,
    run_id: str,
    messages: list[message_pb2.Message],
    *,
    mode: int = CHAT,
    owner: str = "alice",
    context: pb.ContextOptions | None = None,
) -> pb.BeginRunResponse:
    profile = chat_profile() if mode == CHAT else automation_profile()
    return await h.stub.BeginRun(
        pb.BeginRunRequest(
            thread_id=thread_id,
            runtime_mode=mode,
            run_id=run_id,
            profile=profile,
            input_messages=messages,
            context=context,
        ),
        metadata=h.md(owner),
    )


async def finish(
    h: History,
    run_id: str,
    messages: list[message_pb2.Message],
    *,
    state: int = pb.RUN_STATE_SUCCEEDED,
    owner: str = "alice",
) -> pb.FinishRunResponse:
    return await h.stub.FinishRun(
        pb.FinishRunRequest(run_id=run_id, state=state, output_messages=messages),
        metadata=h.md(owner),
    )


async def append(
    h: History,
    thread_id: str,
    messages: list[message_pb2.Message],
    *,
    mode: int = CHAT,
    owner: str = "alice",
) -> pb.AppendMessagesResponse:
    return await h.stub.AppendMessages(
        pb.AppendMessagesRequest(thread_id=thread_id, messages=messages, runtime_mode=mode),
        metadata=h.md(owner),
    )


def ids(messages: object) -> list[str]:
    # Messages given as protobuf or domain objects: both have an id.
    return [m.id for m in messages]  # type: ignore[attr-defined]
