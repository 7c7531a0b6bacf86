"""RouterService: proto -> RouteInput -> decider -> clamp -> proto."""

from __future__ import annotations

from typing import Any

import grpc
from agentmesh.router.v1 import router_service_pb2 as pb
from agentmesh.router.v1 import router_service_pb2_grpc as pb_grpc

from services.router import core
from services.router.core import RouteInput
from services.router.deciders import Decider
from shared.domain import EXECUTOR_TO_PB
from shared.identity import owner_id
from shared.messages import msg_from_pb, usage_to_pb
from shared.profiles import profile_from_pb


class RouterServicer(pb_grpc.RouterServiceServicer):
    def __init__(self, decider: Decider) -> None:
        self.decider = decider

    async def Route(
        self, request: pb.RouteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RouteResponse:
        owner_id(context)
        profile = profile_from_pb(request.profile, "profile")
        conversation = [
            msg_from_pb(m, f"context_messages[{i}]") for i, m in enumerate(request.context_messages)
        ]
        new_input = (
            msg_from_pb(request.input_message, "input_message")
            if request.HasField("input_message")
            else None
        )
        if new_input is not None:
            conversation.append(new_input)
        route_input = RouteInput(
            profile=profile,
            input_text=new_input.text if new_input is not None else "",
            tools=tuple(t.name for t in request.tools),
        )
        decision = core.clamp(await self.decider.decide(route_input, conversation), route_input)
        response = pb.RouteResponse(
            executor=EXECUTOR_TO_PB[decision.executor],
            tool_names=list(decision.tool_names),
            reason=decision.reason,
        )
        if decision.usage is not None:
            response.usage.CopyFrom(usage_to_pb(decision.usage))
        return response
