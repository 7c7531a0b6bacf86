"""Who decides a route: the deterministic rule (the scripted default) or a chat model.

Either way the servicer clamps the decision to the profile (core.clamp). The model is asked
only when there is something to decide (core.has_choice) and then within bounds: the last
MODEL_CONTEXT_MESSAGES of the conversation, at most MODEL_MAX_TOKENS of answer, the
decider's timeout; a late, failed or unusable answer falls back to the rule."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import Protocol

from services.router import core
from services.router.core import Route, RouteInput
from shared.messages import Msg, TextBlock, Usage, system
from shared.model.base import ChatModel, ModelError
from shared.model.cards import ModelCard
from shared.model.tokens import messages_tokens, text_tokens

log = logging.getLogger("agentmesh.router")

# What a routing call carries and may answer: the newest messages (the step's input last)
# say what the step needs; the answer is a short JSON object.
MODEL_CONTEXT_MESSAGES = 4
MODEL_MAX_TOKENS = 96


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
        card = getattr(model, "card", None)
        offers_max_tokens = (
            isinstance(card, ModelCard) and "max_tokens" in card.parameter_properties
        )
        self.options = {"max_tokens": MODEL_MAX_TOKENS} if offers_max_tokens else None

    async def decide(self, request: RouteInput, conversation: Sequence[Msg]) -> Route:
        if not core.has_choice(request):
            return core.route_by_rule(request)
        prompt = [
            system(core.routing_prompt(request.tools)),
            *conversation[-MODEL_CONTEXT_MESSAGES:],
        ]
        text: list[str] = []
        reported: Usage | None = None
        try:
            async with asyncio.timeout(self.timeout_seconds):
                stream = (
                    self.model.stream(prompt, options=self.options)
                    if self.options
                    else self.model.stream(prompt)
                )
                async with aclosing(stream) as chunks:
                    async for chunk in chunks:
                        text.extend(b.text for b in chunk.content if isinstance(b, TextBlock))
                        reported = chunk.usage or reported
        except TimeoutError:
            log.warning("routing model timed out; using the rule")
            return core.route_by_rule(request)
        except ModelError as e:
            # The route is an optimisation: a model that cannot answer does not fail the run
            # (the worker's own call reports the model's state).
            log.warning("routing model failed (%s); using the rule", e.reason)
            return core.route_by_rule(request)
        answer = "".join(text)
        # The call's tokens are the run's whether its answer is used or not (counted here
        # when the endpoint reported none, as the executor's are).
        usage = reported or Usage(messages_tokens(prompt), text_tokens(answer), estimated=True)
        decision = core.parse_model_route(answer, request) or core.route_by_rule(request)
        return replace(decision, usage=usage)
