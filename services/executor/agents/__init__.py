"""The agents this executor hosts, by executor kind: the worker (conversation and tool
orchestration) and the memory agent (extract, write and forget memories)."""

from __future__ import annotations

from services.executor.agent_config import ModelResolver
from services.executor.agents.base import Agent, StepRequest
from services.executor.agents.memory import MemoryAgent, Watermarks
from services.executor.agents.worker import WorkerAgent
from services.executor.config import ExecutorConfig
from services.executor.recall import MemorySearch
from services.executor.tools import ToolRegistry
from shared.domain import ExecutorKind
from shared.model.base import ChatModel

__all__ = ["Agent", "StepRequest", "build_agents"]


def build_agents(
    model: ChatModel,
    tools: ToolRegistry,
    config: ExecutorConfig,
    watermarks: Watermarks,
    models: ModelResolver | None = None,
    memories: MemorySearch | None = None,
) -> dict[ExecutorKind, Agent]:
    """`models` gives a profile's model card its model (AgentConfig.model_card); `memories`
    is what recall searches (services.executor.recall; None: nothing is recalled)."""
    return {
        ExecutorKind.WORKER: WorkerAgent(
            model,
            tools,
            max_tool_rounds=config.max_tool_rounds,
            tool_timeout_seconds=config.tool_timeout_seconds,
            models=models,
            memories=memories,
        ),
        ExecutorKind.MEMORY: MemoryAgent(
            model,
            # The memory agent runs with no person to ask: tools that need approval are
            # not there for it (a call to one is refused as not registered).
            tools.without_approval(),
            watermarks,
            max_tool_rounds=config.max_tool_rounds,
            tool_timeout_seconds=config.tool_timeout_seconds,
            models=models,
            memories=memories,
        ),
    }
