"""The chat model this process uses: the model layer's factory (settings.model_provider and
the model card settings; the offline scripted model by default)."""

from __future__ import annotations

from shared.model.base import ChatModel
from shared.model.factory import create_model
from shared.settings import Settings


def model_for(settings: Settings) -> ChatModel:
    return create_model(settings)


class CardModels:
    """The model of each card a profile names (AgentConfig.model_card), created once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._models: dict[str, ChatModel] = {}

    def __call__(self, card_name: str) -> ChatModel:
        model = self._models.get(card_name)
        if model is None:
            model = self._models[card_name] = create_model(self.settings, card_name)
        return model
