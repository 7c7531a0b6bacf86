"""Router wiring: the decider behind RouterService. The router owns no tables.

With the offline scripted model the deterministic rule decides (asking the scripted model
would add nothing); any other provider is asked, within the unary deadline."""

from __future__ import annotations

import grpc
from agentmesh.router.v1 import router_service_pb2, router_service_pb2_grpc

from services.router.deciders import Decider, ModelDecider, RuleDecider
from services.router.servicer import RouterServicer
from shared.model.base import ChatModel
from shared.model.factory import create_model
from shared.server import ServiceParts
from shared.settings import Settings

SERVICE_NAME = router_service_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name

migrate = None


def decider_for(settings: Settings, model: ChatModel | None = None) -> Decider:
    if model is None and settings.model_provider == "scripted":
        return RuleDecider()
    if model is None:
        # The model layer's factory: provider and card from settings (CardError explains).
        model = create_model(settings)
    # Leave part of the caller's deadline for the answer itself.
    return ModelDecider(model, timeout_seconds=settings.rpc_timeout_seconds * 0.8)


async def build(settings: Settings, *, model: ChatModel | None = None) -> ServiceParts:
    servicer = RouterServicer(decider_for(settings, model))

    def register(server: grpc.aio.Server) -> None:
        router_service_pb2_grpc.add_RouterServiceServicer_to_server(servicer, server)

    return ServiceParts(register=register, service_names=[SERVICE_NAME])
