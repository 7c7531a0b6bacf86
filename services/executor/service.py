"""Executor wiring: the model, the tool registry (the memory tools over the memory service)
and the agents behind ExecutorService.

The executor owns no tables (nothing to migrate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
from agentmesh.executor.v1 import executor_service_pb2, executor_service_pb2_grpc

from services.executor.agents import build_agents
from services.executor.config import ExecutorConfig
from services.executor.memory_tools import MemoryClient, builtin_tools
from services.executor.models import CardModels, model_for
from services.executor.servicer import ExecutorServicer
from services.executor.tools import Tool, ToolRegistry
from shared.model.base import ChatModel
from shared.server import ServiceParts
from shared.settings import Settings
from shared.tools import REGISTERED_TOOLS, deployment_tools

if TYPE_CHECKING:
    from services.executor.tool_sources import ToolSources

SERVICE_NAME = executor_service_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name

migrate = None


async def build(
    settings: Settings,
    *,
    model: ChatModel | None = None,
    tools: tuple[Tool, ...] | None = None,
    config: ExecutorConfig | None = None,
) -> ServiceParts:
    """`tools` replaces the registered tools (tests); by default they are the built-ins."""
    config = config or ExecutorConfig()
    memory = MemoryClient(settings.addr("memory"), settings.rpc_timeout_seconds)
    tools_config, _ = deployment_tools(settings, "executor")
    sources: ToolSources | None = None
    if tools_config.mcp_servers or tools_config.http_tools:
        # Imported only when the deployment configures outside tools: the mcp SDK and its
        # dependencies (httpx2, mcp_types' models, starlette, uvicorn) are ~40 MB of RSS
        # that a process with no outside tools would hold for nothing (issue 24).
        from services.executor.tool_sources import ToolSources

        sources = ToolSources(tools_config, config.tool_timeout_seconds)
    registry = ToolRegistry(builtin_tools(memory) if tools is None else tools, sources)
    if tools is None and set(registry.builtin_names()) != set(REGISTERED_TOOLS):
        raise RuntimeError("the executor's tools differ from shared.tools.REGISTERED_TOOLS")
    # MCP servers down now are listed again later (ToolRegistry.refresh at each step).
    if sources is not None:
        await sources.start()
    agents = build_agents(
        model or model_for(settings),
        registry,
        config,
        memory,
        CardModels(settings),
        memories=memory,
    )
    servicer = ExecutorServicer(agents, registry)

    def register(server: grpc.aio.Server) -> None:
        executor_service_pb2_grpc.add_ExecutorServiceServicer_to_server(servicer, server)

    async def on_stop() -> None:
        if sources is not None:
            await sources.close()
        await memory.aclose()

    return ServiceParts(register=register, service_names=[SERVICE_NAME], on_stop=on_stop)
