"""Who decides a route: the deterministic rule (the scripted default) or a chat model.

Either way the servicer clamps the decision to the profile (core.clamp)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import aclosing
from typing import Protocol

from services.router import core
from services.router.core import Route, RouteInput
from shared.messages import Msg, TextBlock, system
from shared.model.base import ChatModel

log = logging.getLogger("agentmesh.router")


class Decider(Protocol):
    async def decide(self, request: RouteInput, conversation: Sequence[Msg]) -> Route: ...


class RuleDecider:
    async def decide(self, request: RouteInput, conversation: Sequence[Msg]) -> Route:
        return core.route_by_rule(request)


class ModelDecider:
    """Asks a model which tools the step needs; falls back to the rule when the model's
    answer is unusable or late. The executor is the profile's whatever the model says."""

    def __init__(self, model: ChatModel, timeout_seconds: float) -> None:
        self.model = model
        self.timeout_seconds = timeout_seconds

    async def decide(self, request: RouteInput, conversation: Sequence[Msg]) -> Route:
        if not request.tools:
            # Nothing to choose: the executor is fixed by the profile.
            return core.route_by_rule(request)
        prompt = [system(core.routing_prompt(request.tools)), *conversation]
        text: list[str] = []
        try:
            async with asyncio.timeout(self.timeout_seconds):
                async with aclosing(self.model.stream(prompt)) as stream:
                    async for chunk in stream:
                        text.extend(b.text for b in chunk.content if isinstance(b, TextBlock))
        except TimeoutError:
            log.warning("routing model timed out; using the rule")
            return core.route_by_rule(request)
        decision = core.parse_model_route("".join(text), request)
        return decision if decision is not None else core.route_by_rule(request)
