"""Executor wiring: the model, the tool registry and the agents behind ExecutorService.

The executor owns no tables (nothing to migrate)."""

from __future__ import annotations

import grpc
from agentmesh.executor.v1 import executor_service_pb2, executor_service_pb2_grpc

from services.executor.agents import build_agents
from services.executor.config import ExecutorConfig
from services.executor.models import model_for
from services.executor.servicer import ExecutorServicer
from services.executor.tools import Tool, ToolRegistry
from shared.model.base import ChatModel
from shared.server import ServiceParts
from shared.settings import Settings

SERVICE_NAME = executor_service_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name

migrate = None


async def build(
    settings: Settings,
    *,
    model: ChatModel | None = None,
    tools: tuple[Tool, ...] = (),
    config: ExecutorConfig | None = None,
) -> ServiceParts:
    agents = build_agents(
        model or model_for(settings), ToolRegistry(tools), config or ExecutorConfig()
    )
    servicer = ExecutorServicer(agents)

    def register(server: grpc.aio.Server) -> None:
        executor_service_pb2_grpc.add_ExecutorServiceServicer_to_server(servicer, server)

    return ServiceParts(register=register, service_names=[SERVICE_NAME])
