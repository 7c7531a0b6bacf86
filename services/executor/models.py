"""The chat model this process uses, chosen by settings.model_provider."""

from __future__ import annotations

from shared.model.base import ChatModel
from shared.model.scripted import ScriptedModel
from shared.settings import Settings


def model_for(settings: Settings) -> ChatModel:
    if settings.model_provider == "scripted":
        return ScriptedModel(settings.scripted_token_latency)
    raise ValueError(f"AGENTMESH_MODEL_PROVIDER: unsupported model provider {settings.model_provider!r}")
