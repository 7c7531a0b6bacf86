"""A finished chat run's messages join the owner's conversation index (the memory service),
so a later run of a profile with conversation recall finds them from another thread; an
automation input never does."""

from __future__ import annotations

import json
import uuid

from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.type.v1 import message_pb2

from services.orchestrator import core
from shared.domain import ExecutorKind, MessageKind, RuntimeMode
from shared.messages import assistant, msg_to_pb, system, user
from shared.profiles import (
    AUTOMATION_MEMORY_DEFAULT,
    BUILT_INS,
    CHAT_DEFAULT,
    ExecutionProfile,
    MemoryPolicy,
    ProfileRegistry,
    profile_to_pb,
)
from shared.settings import Settings
from tests.orchestrator.conftest import ALICE, collect, running_suite, start_request

RECALLING = ExecutionProfile(
    name="chat_recall",
    enable_router=False,
    executor=ExecutorKind.WORKER,
    memory=MemoryPolicy(mode="recall", conversation=True),
)
REGISTRY = ProfileRegistry({**BUILT_INS, RECALLING.name: RECALLING})
BOB = (("x-agentmesh-owner", "bob"),)


def _ids() -> tuple[str, str]:
    return f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"


async def _recalled(suite, owner_md, thread_id: str, run_id: str) -> list[dict[str, object]]:
    audit = await suite.history.ListAudit(
        history_pb.ListAuditRequest(
            owner_id=dict(owner_md)["x-agentmesh-owner"],
            filter=history_pb.AuditFilter(thread_id=thread_id),
        ),
        metadata=(*owner_md, ("x-agentmesh-scope", "admin")),
    )
    records = [
        m
        for m in audit.messages
        if m.kind == message_pb2.MESSAGE_KIND_MEMORY_RECALL and m.run_id == run_id
    ]
    if not records:
        return []
    [record] = records
    return list(json.loads(record.metadata.extra_json)["memory_recall"])


async def test_a_chat_message_is_recalled_from_a_new_thread_and_only_for_its_owner(
    settings: Settings,
) -> None:
    old_thread, old_run = _ids()
    new_thread, new_run = _ids()
    bob_thread, bob_run = _ids()
    told = user("my locker code at the gym is 4711", id=f"said-{old_run}")
    async with running_suite(settings, router=False, memory=True, profiles=REGISTRY) as suite:
        await collect(
            suite.orchestrator.StartRun(
                start_request(
                    old_thread, old_run, messages=[msg_to_pb(told)], profile_name="chat_recall"
                ),
                metadata=ALICE,
            )
        )
        await collect(
            suite.orchestrator.StartRun(
                start_request(
                    new_thread, new_run, "what is my locker code?", profile_name="chat_recall"
                ),
                metadata=ALICE,
            )
        )
        await collect(
            suite.orchestrator.StartRun(
                start_request(
                    bob_thread, bob_run, "what is my locker code?", profile_name="chat_recall"
                ),
                metadata=BOB,
            )
        )
        recalled = await _recalled(suite, ALICE, new_thread, new_run)
        bobs = await _recalled(suite, BOB, bob_thread, bob_run)
    assert told.id in [r["id"] for r in recalled]
    [item] = [r for r in recalled if r["id"] == told.id]
    assert item["source"] == "conversation" and item["threadId"] == old_thread
    assert bobs == []


def _plan(origin: RuntimeMode) -> core.RunPlan:
    profile = CHAT_DEFAULT if origin is RuntimeMode.CHAT else AUTOMATION_MEMORY_DEFAULT
    return core.RunPlan(
        owner="alice",
        thread_id="t",
        run_id="r",
        origin=origin,
        profile=profile,
        inputs=(user("hello", id="in", kind=MessageKind.USER_MESSAGE),),
        time_zone="UTC",
    )


def test_only_a_chat_runs_user_messages_and_replies_with_text_are_indexed() -> None:
    chat = _plan(RuntimeMode.CHAT)
    reply = assistant("hi there", id="out", kind=MessageKind.AGENT_REPLY)
    empty = assistant("", id="empty", kind=MessageKind.AGENT_REPLY)
    recall = system("What you know", id="rec", kind=MessageKind.MEMORY_RECALL)
    said = core.recallable(chat, [*chat.inputs, reply, empty, recall])
    assert [m.id for m in said] == ["in", "out"]
    automation = _plan(RuntimeMode.AUTOMATION)
    assert core.recallable(automation, [*automation.inputs, reply]) == []


def test_the_profile_of_the_plan_round_trips() -> None:
    # The recalling profile travels between the services whole.
    assert profile_to_pb(RECALLING).memory.conversation
