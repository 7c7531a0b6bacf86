"""Domain enums shared by every service, and their protobuf counterparts."""

from __future__ import annotations

from enum import StrEnum

from agentmesh.history.v1 import history_service_pb2
from agentmesh.memory.v1 import memory_service_pb2
from agentmesh.type.v1 import execution_profile_pb2, message_pb2

from shared.errors import InvalidArgument


class RuntimeMode(StrEnum):
    CHAT = "chat"
    AUTOMATION = "automation"


class MessageKind(StrEnum):
    USER_MESSAGE = "user_message"
    AGENT_REPLY = "agent_reply"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    # The memories a run recalled into its context (services/executor/recall.py).
    MEMORY_RECALL = "memory_recall"
    # The router's decision when a model made it, with that call's usage (services/router).
    ROUTE = "route"


class ExecutorKind(StrEnum):
    WORKER = "worker"
    MEMORY = "memory"


class RunState(StrEnum):
    """A run's state: the one vocabulary of run states, by the names history records, CancelRun
    answers and the HTTP API shows (mapped once to protobuf: RUN_STATE_TO_PB)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


# The ends of a run: nothing follows one of them.
TERMINAL_RUN_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.INTERRUPTED}
)


# The threads of automation jobs are named `automation:<job id>` (the scheduler's runs use
# them). The namespace is reserved: a chat run naming such a thread is refused before
# anything is stored, so no chat can take a job's thread (and break the job for good).
AUTOMATION_THREAD_PREFIX = "automation:"


def automation_thread_id(job_id: str) -> str:
    return f"{AUTOMATION_THREAD_PREFIX}{job_id}"


def is_automation_thread_id(thread_id: str) -> bool:
    return thread_id.startswith(AUTOMATION_THREAD_PREFIX)


RUNTIME_MODE_TO_PB = {
    RuntimeMode.CHAT: message_pb2.RUNTIME_MODE_CHAT,
    RuntimeMode.AUTOMATION: message_pb2.RUNTIME_MODE_AUTOMATION,
}
# Keyed by plain int: a request field read from the wire is any number.
RUNTIME_MODE_FROM_PB: dict[int, RuntimeMode] = {v: k for k, v in RUNTIME_MODE_TO_PB.items()}

MESSAGE_KIND_TO_PB = {
    MessageKind.USER_MESSAGE: message_pb2.MESSAGE_KIND_USER_MESSAGE,
    MessageKind.AGENT_REPLY: message_pb2.MESSAGE_KIND_AGENT_REPLY,
    MessageKind.TOOL_CALL: message_pb2.MESSAGE_KIND_TOOL_CALL,
    MessageKind.TOOL_RESULT: message_pb2.MESSAGE_KIND_TOOL_RESULT,
    MessageKind.MEMORY_RECALL: message_pb2.MESSAGE_KIND_MEMORY_RECALL,
    MessageKind.ROUTE: message_pb2.MESSAGE_KIND_ROUTE,
}
MESSAGE_KIND_FROM_PB: dict[int, MessageKind] = {v: k for k, v in MESSAGE_KIND_TO_PB.items()}

EXECUTOR_TO_PB = {
    ExecutorKind.WORKER: execution_profile_pb2.EXECUTOR_WORKER,
    ExecutorKind.MEMORY: execution_profile_pb2.EXECUTOR_MEMORY,
}
EXECUTOR_FROM_PB: dict[int, ExecutorKind] = {v: k for k, v in EXECUTOR_TO_PB.items()}

RUN_STATE_TO_PB = {
    RunState.QUEUED: history_service_pb2.RUN_STATE_QUEUED,
    RunState.RUNNING: history_service_pb2.RUN_STATE_RUNNING,
    RunState.SUCCEEDED: history_service_pb2.RUN_STATE_SUCCEEDED,
    RunState.FAILED: history_service_pb2.RUN_STATE_FAILED,
    RunState.CANCELLED: history_service_pb2.RUN_STATE_CANCELLED,
    RunState.INTERRUPTED: history_service_pb2.RUN_STATE_INTERRUPTED,
}
RUN_STATE_FROM_PB: dict[int, RunState] = {v: k for k, v in RUN_STATE_TO_PB.items()}

# How a memory search ran (SearchMemoriesResponse.mode), as the API and the audit name it; a
# memory service that does not say (older than the field) is absent from both.
SEARCH_MODE_NAMES = {
    memory_service_pb2.SEARCH_MODE_HYBRID: "hybrid",
    memory_service_pb2.SEARCH_MODE_LEXICAL: "lexical",
}


def runtime_mode_from_pb(value: int, field: str) -> RuntimeMode:
    try:
        return RUNTIME_MODE_FROM_PB[value]
    except KeyError:
        raise InvalidArgument(field, "must be chat or automation") from None


def message_kind_from_pb(value: int, field: str) -> MessageKind:
    try:
        return MESSAGE_KIND_FROM_PB[value]
    except KeyError:
        raise InvalidArgument(
            field, "must be user_message, agent_reply, tool_call or tool_result"
        ) from None
