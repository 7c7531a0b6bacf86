"""A step's model call setup from its profile's AgentConfig (shared.profiles): which model
(the profile's card, else the executor's), which options (sampling, output limit), which
system prompt (the template rendered for the owner's zone and local date)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.errors import FailedPrecondition
from shared.messages import Msg
from shared.model.base import ChatModel, ChatResponse, OutputSchema, ToolSpec
from shared.model.cards import CardError, ModelCard
from shared.profiles import AgentConfig

# A card name -> that card's model (the executor's factory, models cached).
ModelResolver = Callable[[str], ChatModel]


@dataclass(frozen=True)
class CallSetup:
    model: ChatModel
    card: ModelCard | None
    options: dict[str, Any] = field(default_factory=dict)
    system_prompt: str = ""
    # The template, to place recalled memories at its {memories} placeholder.
    agent: AgentConfig | None = None
    time_zone: str = "UTC"
    now: datetime | None = None

    def stream(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        output_schema: OutputSchema | None = None,
    ) -> AsyncGenerator[ChatResponse, None]:
        extra: dict[str, Any] = {}
        if self.options:
            extra["options"] = self.options
        if output_schema is not None:
            extra["output_schema"] = output_schema
        return self.model.stream(messages, tools=tools, **extra)

    def prompt_with(self, memories: str) -> tuple[str, bool]:
        """The system prompt with the recalled `memories` block at the template's
        {memories} placeholder, and whether the template placed it (else the block goes in
        a system message of its own after the prompt)."""
        if memories and self.agent is not None and self.agent.places_memories():
            now = self.now or datetime.now(UTC)
            return self.agent.render_prompt(self.time_zone, now, memories), True
        return self.system_prompt, False


def card_of(model: ChatModel) -> ModelCard | None:
    card = getattr(model, "card", None)
    return card if isinstance(card, ModelCard) else None


def setup(
    agent: AgentConfig,
    time_zone: str,
    default: ChatModel,
    resolve: ModelResolver | None,
    now: datetime | None = None,
) -> CallSetup:
    """The call setup of a step; FAILED_PRECONDITION naming profile.agent.<field> when the
    profile's card cannot be used or rejects its options."""
    model = default
    if agent.model_card and resolve is not None:
        try:
            model = resolve(agent.model_card)
        except CardError as err:
            raise FailedPrecondition(
                f"profile.agent.model_card: {err}", reason="AGENT_CONFIG_INVALID"
            ) from None
    card = card_of(model)
    options = agent.options()
    if card is not None and options:
        try:
            card.resolve_parameters(options)
        except ValueError as err:
            raise FailedPrecondition(
                f"profile.agent.{str(err).removeprefix('options.')}", reason="AGENT_CONFIG_INVALID"
            ) from None
    now = now or datetime.now(UTC)
    prompt = agent.render_prompt(time_zone, now)
    return CallSetup(model, card, options, prompt, agent, time_zone, now)
