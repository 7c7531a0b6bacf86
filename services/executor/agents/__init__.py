"""The agents this executor hosts, by executor kind. Adding one (the memory agent) is one
entry in `build_agents`."""

from __future__ import annotations

from services.executor.agents.base import Agent, StepRequest
from services.executor.agents.worker import WorkerAgent
from services.executor.config import ExecutorConfig
from services.executor.tools import ToolRegistry
from shared.domain import ExecutorKind
from shared.model.base import ChatModel

__all__ = ["Agent", "StepRequest", "build_agents"]


def build_agents(
    model: ChatModel, tools: ToolRegistry, config: ExecutorConfig
) -> dict[ExecutorKind, Agent]:
    return {
        ExecutorKind.WORKER: WorkerAgent(
            model,
            tools,
            max_tool_rounds=config.max_tool_rounds,
            tool_timeout_seconds=config.tool_timeout_seconds,
        ),
    }
