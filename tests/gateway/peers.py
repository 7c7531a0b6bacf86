"""gRPC peer doubles of the gateway's tests: real grpc.aio servers (shared bootstrap, health,
error interceptor) with small in-memory servicers. The orchestrator streams scripted,
valid event sequences chosen by the thread id's prefix."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from agentmesh.history.v1 import history_service_pb2, history_service_pb2_grpc
from agentmesh.memory.v1 import memory_service_pb2, memory_service_pb2_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2, orchestrator_service_pb2_grpc
from agentmesh.type.v1 import content_pb2, message_pb2, run_event_pb2
from google.protobuf import struct_pb2

from shared.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from shared.identity import owner_id, require_admin
from shared.server import ServiceParts

R = run_event_pb2


@dataclass
class Recorded:
    request: Any
    metadata: dict[str, str]
    time_remaining: float | None


def _record(calls: list[Recorded], request: Any, context: grpc.aio.ServicerContext) -> None:
    md = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
    calls.append(Recorded(request, md, context.time_remaining()))


# A chat run whose thread starts with "usage-" reports this usage on RUN_FINISHED.
USAGE_SCRIPT = message_pb2.Usage(input_tokens=120, output_tokens=30)


def usage_of(thread_id: str) -> message_pb2.Usage | None:
    return USAGE_SCRIPT if thread_id.startswith("usage-") else None


def chat_script(thread_id: str, run_id: str) -> list[R.RunEvent]:
    """The event sequence of a chat run (chat_default: router on, worker)."""
    mid = f"{run_id}-reply"
    payloads: list[dict[str, Any]] = [
        {"run_started": R.RunStarted()},
        {"step_started": R.StepStarted(step_name="router")},
        {"step_finished": R.StepFinished(step_name="router")},
        {"step_started": R.StepStarted(step_name="worker")},
        {"text_message_start": R.TextMessageStart(message_id=mid, role=message_pb2.ROLE_ASSISTANT)},
        {"text_message_content": R.TextMessageContent(message_id=mid, delta="Hello")},
        {"text_message_content": R.TextMessageContent(message_id=mid, delta="")},
        {"text_message_content": R.TextMessageContent(message_id=mid, delta=", Lin.\nBye")},
        {"text_message_end": R.TextMessageEnd(message_id=mid)},
        {"step_finished": R.StepFinished(step_name="worker")},
        {"run_finished": R.RunFinished(outcome=R.RUN_OUTCOME_SUCCESS, usage=usage_of(thread_id))},
    ]
    return _number(thread_id, run_id, payloads)


def _number(thread_id: str, run_id: str, payloads: list[dict[str, Any]]) -> list[R.RunEvent]:
    now = int(time.time() * 1000)
    return [
        R.RunEvent(thread_id=thread_id, run_id=run_id, sequence=i + 1, timestamp_ms=now + i, **p)
        for i, p in enumerate(payloads)
    ]


def tools_script(thread_id: str, run_id: str) -> list[R.RunEvent]:
    """A run with reasoning, a tool call and its result, a snapshot and a custom event."""
    value = struct_pb2.Value()
    value.struct_value.update({"stage": "memory", "count": 2})
    payloads: list[dict[str, Any]] = [
        {"run_started": R.RunStarted()},
        {"step_started": R.StepStarted(step_name="memory")},
        {"reasoning_start": R.ReasoningStart(message_id="r1")},
        {"reasoning_message_start": R.ReasoningMessageStart(message_id="r1")},
        {"reasoning_message_content": R.ReasoningMessageContent(message_id="r1", delta="think")},
        {"reasoning_message_end": R.ReasoningMessageEnd(message_id="r1")},
        {"reasoning_end": R.ReasoningEnd(message_id="r1")},
        {
            "tool_call_start": R.ToolCallStart(
                tool_call_id="tc1", tool_call_name="memory_write", parent_message_id="m1"
            )
        },
        {"tool_call_args": R.ToolCallArgs(tool_call_id="tc1", delta='{"content":"green tea"}')},
        {"tool_call_end": R.ToolCallEnd(tool_call_id="tc1")},
        {"tool_call_result": R.ToolCallResult(message_id="tr1", tool_call_id="tc1", content="ok")},
        {"custom": R.Custom(name="agentmesh.note", value=value)},
        {"step_finished": R.StepFinished(step_name="memory")},
        {"run_finished": R.RunFinished(outcome=R.RUN_OUTCOME_SUCCESS)},
    ]
    return _number(thread_id, run_id, payloads)


# How long a "wait-" run is silent.
WAIT_SECONDS = 1.0


class FakeOrchestrator(orchestrator_service_pb2_grpc.OrchestratorServiceServicer):
    """Scripts by thread id prefix: "tools-", "reject-", "conflict-", "silent-", "eof-",
    "fail-mid-", "error-", "after-end-", "no-end-", "slow-", "stopped-", "usage-" (RUN_FINISHED
    with USAGE_SCRIPT), "batch-" (three events per
    response when the caller asks for batches, and "batch-after-end-"), "wait-" (silent for
    WAIT_SECONDS after the worker step starts, as during a long tool call); anything else
    is a chat run."""

    def __init__(self) -> None:
        self.calls: list[Recorded] = []
        # What ListTools says of the executor's tool sources; None: UNAVAILABLE (no executor).
        self.tool_sources: list[message_pb2.ToolSourceStatus] | None = []

    async def ListTools(
        self, request: orchestrator_service_pb2.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> orchestrator_service_pb2.ListToolsResponse:
        owner_id(context)
        if self.tool_sources is None:
            raise Unavailable("the executor does not answer")
        return orchestrator_service_pb2.ListToolsResponse(
            profile_name=request.profile_name or "chat_default", sources=self.tool_sources
        )

    async def StartRun(
        self, request: orchestrator_service_pb2.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[orchestrator_service_pb2.StartRunResponse]:
        _record(self.calls, request, context)
        owner_id(context)
        tid, rid = request.thread_id, request.run_id
        if tid.startswith("reject-"):
            raise InvalidArgument("thread_id", "is not a thread this test accepts")
        if tid.startswith("conflict-"):
            raise FailedPrecondition("the thread is an automation thread")
        if tid.startswith("silent-"):
            await asyncio.sleep(30)
        if tid.startswith("eof-"):
            return
        if tid.startswith("stopped-"):  # a replica shutting down cancels what it serves
            await context.abort(grpc.StatusCode.CANCELLED, "server shutting down")
        events = tools_script(tid, rid) if tid.startswith("tools-") else chat_script(tid, rid)
        if tid.startswith("fail-mid-"):
            for ev in events[:5]:
                yield orchestrator_service_pb2.StartRunResponse(event=ev)
            raise Unavailable("the executor went away")
        if tid.startswith("error-"):
            for ev in events[:2]:
                yield orchestrator_service_pb2.StartRunResponse(event=ev)
            err = R.RunEvent(
                thread_id=tid,
                run_id=rid,
                sequence=3,
                run_error=R.RunError(message="model failed", code="MODEL_ERROR"),
            )
            yield orchestrator_service_pb2.StartRunResponse(event=err)
            yield orchestrator_service_pb2.StartRunResponse(event=events[2])
            return
        if tid.startswith("no-end-"):
            events = events[:-1]
        if tid.startswith(("after-end-", "batch-after-end-")):
            events = [*events, events[1]]
        if tid.startswith("batch-") and request.batch_events:
            # What a batching orchestrator sends: several events per response.
            for i in range(0, len(events), 3):
                yield orchestrator_service_pb2.StartRunResponse(events=events[i : i + 3])
            return
        for ev in events:
            if tid.startswith("slow-"):
                await asyncio.sleep(0.2)
            if tid.startswith("wait-") and ev.HasField("text_message_start"):
                await asyncio.sleep(WAIT_SECONDS)
            yield orchestrator_service_pb2.StartRunResponse(event=ev)

    async def StreamRun(
        self, request: orchestrator_service_pb2.StreamRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[orchestrator_service_pb2.StreamRunResponse]:
        """Runs whose id starts with "started-" have a log (a chat run's events, from the
        thread "silent-started"); any other run has none."""
        _record(self.calls, request, context)
        owner_id(context)
        if not request.run_id.startswith("started-"):
            raise NotFound("run not found")
        for ev in chat_script("silent-started", request.run_id)[request.after_sequence :]:
            yield orchestrator_service_pb2.StreamRunResponse(event=ev)


def _ts(message: message_pb2.Message, seconds: int) -> message_pb2.Message:
    message.created_at.FromSeconds(seconds)
    return message


def text_message(
    mid: str, thread_id: str, role: int, text: str, *, mask: int = 3, seconds: int = 1_700_000_000
) -> message_pb2.Message:
    return _ts(
        message_pb2.Message(
            id=mid,
            role=role,
            thread_id=thread_id,
            run_id="run-1",
            kind=message_pb2.MESSAGE_KIND_USER_MESSAGE
            if role == message_pb2.ROLE_USER
            else message_pb2.MESSAGE_KIND_AGENT_REPLY,
            content=[content_pb2.ContentBlock(text=content_pb2.TextBlock(text=text))],
            visibility_mask=mask,
            metadata=message_pb2.MessageMetadata(
                origin=message_pb2.RUNTIME_MODE_CHAT,
                executor=1,
                execution_profile_name="chat_default",
                hidden_from_user=mask & 1 == 0,
            ),
        ),
        seconds,
    )


@dataclass
class FakeHistory(history_service_pb2_grpc.HistoryServiceServicer):
    """Owner-scoped threads, messages and runs held in memory; seeded by the tests."""

    threads: dict[tuple[str, str], history_service_pb2.Thread] = field(default_factory=dict)
    messages: dict[tuple[str, str], list[message_pb2.Message]] = field(default_factory=dict)
    runs: dict[tuple[str, str], history_service_pb2.Run] = field(default_factory=dict)
    denials: list[history_service_pb2.ToolDenial] = field(default_factory=list)
    # What GetOwnerUsage answers, by owner (the real sum is history's, tests/history).
    usage: dict[str, list[history_service_pb2.OwnerUsageDay]] = field(default_factory=dict)
    calls: list[Recorded] = field(default_factory=list)

    def seed(self, owner: str, thread_id: str, messages: list[message_pb2.Message]) -> None:
        thread = history_service_pb2.Thread(
            id=thread_id,
            runtime_mode=message_pb2.RUNTIME_MODE_CHAT,
            message_count=len(messages),
            shown_message_count=len(messages),
        )
        thread.create_time.FromSeconds(1_700_000_000)
        thread.update_time.FromSeconds(1_700_000_100)
        self.threads[(owner, thread_id)] = thread
        self.messages[(owner, thread_id)] = messages

    # A double: answers whatever request of the method it gets.
    async def ListThreads(self, request, context):  # type: ignore[no-untyped-def]
        _record(self.calls, request, context)
        owner = owner_id(context)
        mine = [t for (o, _), t in sorted(self.threads.items()) if o == owner]
        return history_service_pb2.ListThreadsResponse(threads=mine)

    # A double (as above).
    async def ListHistory(self, request, context):  # type: ignore[no-untyped-def]
        _record(self.calls, request, context)
        owner = owner_id(context)
        if request.page_token and request.page_token != "p2":
            raise InvalidArgument("page_token", "is not a page token this service issued")
        if (owner, request.thread_id) not in self.threads:
            raise NotFound(f"thread {request.thread_id} not found")
        visible = [m for m in self.messages[(owner, request.thread_id)] if m.visibility_mask & 1]
        if request.direction == history_service_pb2.DIRECTION_BACKWARD:
            visible.reverse()
        size = request.page_size or 50
        start = 0 if not request.page_token else size
        token = "p2" if len(visible) > start + size else ""
        return history_service_pb2.ListHistoryResponse(
            messages=visible[start : start + size], next_page_token=token
        )

    # A double (as above).
    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        _record(self.calls, request, context)
        run = self.runs.get((owner_id(context), request.run_id))
        if run is None:
            raise NotFound(f"run {request.run_id} not found")
        return history_service_pb2.GetRunResponse(run=run)

    async def GetOwnerUsage(self, request, context):  # type: ignore[no-untyped-def]
        _record(self.calls, request, context)
        days = [
            d
            for d in self.usage.get(owner_id(context), [])
            if request.from_day <= d.day <= request.to_day
        ]
        return history_service_pb2.GetOwnerUsageResponse(days=days)

    # A double (as above).
    async def ListAudit(self, request, context):  # type: ignore[no-untyped-def]
        _record(self.calls, request, context)
        owner_id(context)
        require_admin(context)
        found = [
            m for (o, _), ms in sorted(self.messages.items()) if o == request.owner_id for m in ms
        ]
        denials = [d for d in self.denials if d.owner_id == request.owner_id]
        return history_service_pb2.ListAuditResponse(messages=found, tool_denials=denials)


@dataclass
class FakeMemory(memory_service_pb2_grpc.MemoryServiceServicer):
    memories: dict[str, dict[str, memory_service_pb2.Memory]] = field(default_factory=dict)
    calls: list[Recorded] = field(default_factory=list)

    def seed(self, owner: str, mid: str, content: str) -> None:
        m = memory_service_pb2.Memory(
            id=mid,
            content=content,
            kind="fact",
            version=1,
            source_run_id="run-1",
            source_message_ids=["m1"],
        )
        m.create_time.FromSeconds(1_700_000_000)
        m.update_time.FromSeconds(1_700_000_000)
        self.memories.setdefault(owner, {})[mid] = m

    # A double (as above).
    async def ListMemories(self, request, context):  # type: ignore[no-untyped-def]
        _record(self.calls, request, context)
        mine = self.memories.get(owner_id(context), {})
        return memory_service_pb2.ListMemoriesResponse(memories=list(mine.values()))

    # A double (as above).
    async def SearchMemories(self, request, context):  # type: ignore[no-untyped-def]
        _record(self.calls, request, context)
        mine = self.memories.get(owner_id(context), {})
        hits = [m for m in mine.values() if request.query.lower() in m.content.lower()]
        # As a memory service without an embedding model answers.
        return memory_service_pb2.SearchMemoriesResponse(
            memories=hits,
            mode=memory_service_pb2.SEARCH_MODE_LEXICAL,
            mode_reason="no_embedding_model",
        )

    # A double (as above).
    async def ForgetMemory(self, request, context):  # type: ignore[no-untyped-def]
        _record(self.calls, request, context)
        mine = self.memories.get(owner_id(context), {})
        if request.id not in mine:
            raise NotFound(f"memory {request.id} not found")
        del mine[request.id]
        return memory_service_pb2.ForgetMemoryResponse(forgotten_ids=[request.id])


def parts_for(name: str, servicer: Any) -> ServiceParts:
    """ServiceParts serving `servicer` as service `name` (None: health only)."""
    adders = {
        "orchestrator": (
            orchestrator_service_pb2_grpc.add_OrchestratorServiceServicer_to_server,
            "agentmesh.orchestrator.v1.OrchestratorService",
        ),
        "history": (
            history_service_pb2_grpc.add_HistoryServiceServicer_to_server,
            "agentmesh.history.v1.HistoryService",
        ),
        "memory": (
            memory_service_pb2_grpc.add_MemoryServiceServicer_to_server,
            "agentmesh.memory.v1.MemoryService",
        ),
        "scheduler": (None, "agentmesh.scheduler.v1.SchedulerService"),
    }
    adder, full_name = adders[name]

    def register(server: grpc.aio.Server) -> None:
        if adder is not None and servicer is not None:
            adder(servicer, server)

    return ServiceParts(register=register, service_names=[full_name])
