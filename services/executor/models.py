"""The chat model this process uses: the model layer's factory (settings.model_provider and
the model card settings; the offline scripted model by default)."""

from __future__ import annotations

from shared.model.base import ChatModel
from shared.model.factory import create_model
from shared.settings import Settings


def model_for(settings: Settings) -> ChatModel:
    return create_model(settings)
