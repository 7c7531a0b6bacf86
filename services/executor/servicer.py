"""ExecutorService: proto -> StepRequest -> the executor's agent -> streamed responses."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any

import grpc
from agentmesh.executor.v1 import executor_service_pb2 as pb
from agentmesh.executor.v1 import executor_service_pb2_grpc as pb_grpc

from services.executor import convert, core, streams
from services.executor.agents import Agent
from services.executor.tools import ToolRegistry
from shared.domain import ExecutorKind
from shared.identity import owner_id
from shared.logs import run_id_var, thread_id_var


class ExecutorServicer(pb_grpc.ExecutorServiceServicer):
    def __init__(
        self, agents: Mapping[ExecutorKind, Agent], tools: ToolRegistry | None = None
    ) -> None:
        self.agents = agents
        self.tools = tools

    async def ListTools(
        self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListToolsResponse:
        owner_id(context)  # an owner's call, like every other
        if self.tools is None:
            return pb.ListToolsResponse()
        self.tools.refresh()
        return pb.ListToolsResponse(
            tools=[convert.registered_tool_to_pb(self.tools, n) for n in self.tools.names()],
            sources=[convert.source_status_to_pb(s) for s in self.tools.source_statuses()],
        )

    async def Execute(
        self, request: pb.ExecuteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ExecuteResponse]:
        step = convert.step_from_pb(request, owner_id(context))
        agent = core.select_agent(step.executor, self.agents)
        run_token = run_id_var.set(step.run_id)
        thread_token = thread_id_var.set(step.thread_id)
        try:
            async with aclosing(agent.run(step)) as items:
                if not request.batch_items:
                    async for item in items:
                        yield convert.item_to_pb(item)
                    return
                # Closed first: its producer task stops before the agent's stream is closed.
                async with aclosing(streams.batches(items)) as ready:
                    async for batch in ready:
                        yield pb.ExecuteResponse(items=[convert.item_to_pb(i) for i in batch])
        finally:
            run_id_var.reset(run_token)
            thread_id_var.reset(thread_token)
