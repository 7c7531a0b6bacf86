"""Pick a service's model from configuration: `create_model(settings, card_name=None)`.

The provider is settings.model_provider (AGENTMESH_MODEL_PROVIDER: "scripted", the default,
or "openai"). The card, first found of:
  1. `card_name` (a service that wants a particular model passes it),
  2. AGENTMESH_MODEL_CARD (a card name in the cards folder, or a path to a YAML file),
  3. "scripted" for the scripted provider (an openai provider needs a card).
The card's provider must be the configured provider, so a stray card never silently
switches a service to a network model. Further variables (ModelSettings):
  AGENTMESH_MODEL_CARDS_DIR        folder of the cards (default: models/ in the repository)
  AGENTMESH_MODEL_PARAMETERS       JSON object of user overrides applied on top of the card
                                   (same rules as the card's `parameters:`)
  AGENTMESH_MODEL_CHECK_ENDPOINTS  true (default): the orchestrator checks each card in use
                                   against its endpoint's GET /models at start
                                   (check_endpoints); false skips that
  AGENTMESH_MODEL_API_KEY_FILE     a secret file holding the API key (first line) of the
                                   card AGENTMESH_MODEL_CARD names: wins over that card's
                                   api_key_env / api_key_file, never read for another card
An openai card's endpoint is its own base_url, or the value of the environment variable its
base_url_env names when that is set (the shipped self-hosted cards name
AGENTMESH_MODEL_BASE_URL, which `make run MODEL=local` sets; hosted cards name none): a
deployment-wide URL moves only the cards that opt in, and no key goes to another card's
host.
The scripted model's token latency is settings.scripted_token_latency
(AGENTMESH_SCRIPTED_TOKEN_LATENCY) unless the card or a call sets token_latency.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.model.base import ChatModel, ModelError
from shared.model.cards import CARDS_DIR, CardError, ModelCard, card_path, load_card
from shared.model.scripted import ScriptedModel
from shared.profiles import AgentConfig
from shared.settings import Settings

log = logging.getLogger(__name__)

PROVIDERS = ("scripted", "openai")
# The deployment-wide base URL the shipped self-hosted cards follow (base_url_env).
DEPLOYMENT_BASE_URL = "AGENTMESH_MODEL_BASE_URL"
# How long the start waits for an endpoint's model list.
CHECK_SECONDS = 3.0
# How many of an endpoint's models a start-up error names.
LISTED_SHOWN = 20


class ModelSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMESH_MODEL_", extra="ignore")

    card: str = ""
    cards_dir: Path = CARDS_DIR
    parameters: str = ""
    api_key_file: Path | None = None
    # AGENTMESH_MODEL_CHECK_ENDPOINTS=false: no card is checked against its endpoint's model
    # list at start (check_endpoints), for an endpoint whose list names models otherwise.
    check_endpoints: bool = True

    @field_validator("parameters")
    @classmethod
    def _json_object(cls, value: str) -> str:
        if value:
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as e:
                raise ValueError(f"AGENTMESH_MODEL_PARAMETERS is not JSON: {e.msg}") from None
            if not isinstance(parsed, dict):
                raise ValueError("AGENTMESH_MODEL_PARAMETERS must be a JSON object")
        return value

    def overrides(self) -> dict[str, Any] | None:
        return json.loads(self.parameters) if self.parameters else None


def resolve_card(
    settings: Settings, card_name: str | None = None, model_settings: ModelSettings | None = None
) -> ModelCard:
    """The card a service uses (see the module docstring); CardError explains a mismatch."""
    ms = model_settings or ModelSettings()
    provider = settings.model_provider
    if provider not in PROVIDERS:
        raise CardError(
            f"AGENTMESH_MODEL_PROVIDER: {provider!r} is not one of {', '.join(PROVIDERS)}"
        )
    source = card_name or ms.card or ("scripted" if provider == "scripted" else "")
    if not source:
        raise CardError(f"AGENTMESH_MODEL_CARD: the {provider} provider needs a model card")
    card = load_card(source, cards_dir=ms.cards_dir, overrides=ms.overrides())
    if card.provider != provider:
        raise CardError(
            f"AGENTMESH_MODEL_CARD: card {card.name} is for the {card.provider} provider but "
            f"AGENTMESH_MODEL_PROVIDER is {provider}"
        )
    return _moved(card)


def _moved(card: ModelCard) -> ModelCard:
    """The card at the base URL its base_url_env holds, when that is set."""
    if card.base_url_env is None:
        return card
    url = os.environ.get(card.base_url_env, "").strip()
    if not url:
        return card
    if not url.startswith(("http://", "https://")):
        raise CardError(
            f"{card.base_url_env}: must start with http:// or https:// (the base_url_env of "
            f"model card {card.name})"
        )
    return card.model_copy(update={"base_url": url})


def _is_deployment_card(source: str, ms: ModelSettings) -> bool:
    """Whether `source` is the card AGENTMESH_MODEL_CARD names (by name or by path)."""
    if not ms.card:
        return False
    return card_path(source, ms.cards_dir).resolve() == card_path(ms.card, ms.cards_dir).resolve()


def agent_problem(settings: Settings, agent: AgentConfig) -> str:
    """What is wrong with a profile's agent against the model cards ("agent.<field>: ...";
    "" when nothing is): its card must load for the configured provider, and the card must
    offer its sampling parameters and output limit with those values."""
    try:
        card = resolve_card(settings, agent.model_card or None)
    except CardError as err:
        return f"agent.model_card: {err}"
    try:
        card.resolve_parameters(agent.options())
    except ValueError as err:
        return f"agent.{str(err).removeprefix('options.')}"
    return ""


def create_model(settings: Settings, card_name: str | None = None) -> ChatModel:
    """The configured model of a service."""
    ms = ModelSettings()
    card = resolve_card(settings, card_name, ms)
    if (
        card.provider == "openai"
        and card.base_url_env != DEPLOYMENT_BASE_URL
        and os.environ.get(DEPLOYMENT_BASE_URL)
    ):
        log.info(
            "model card %s keeps its own endpoint %s: %s moves only the cards whose "
            "base_url_env names it",
            card.name,
            card.base_url,
            DEPLOYMENT_BASE_URL,
        )
    if card.provider == "scripted":
        return ScriptedModel(
            token_latency=settings.scripted_token_latency,
            first_token_latency=settings.scripted_first_token_latency,
            card=card,
        )
    # Imported for an openai card only: the client and httpx (~5 MB of RSS with what httpx
    # loads) are held for nothing by a process on the scripted model (issue 24).
    from shared.model.openai import OpenAIChatModel, read_api_key

    # The deployment's key file is its own card's key: another card's host never sees it.
    key_file = ms.api_key_file if _is_deployment_card(card_name or ms.card, ms) else None
    return OpenAIChatModel(card, api_key=read_api_key(card, key_file))


async def check_endpoints(
    settings: Settings, card_names: Iterable[str | None], *, timeout: float = CHECK_SECONDS
) -> None:
    """Each openai card of `card_names` (None or "": the deployment's card) against its
    endpoint's GET /models, with the card's key, all at once: CardError naming the card when
    the endpoint lists models and not the card's `model` (every request would be refused,
    or, on llama-cpp-python, answered by whatever model it serves); a logged warning when
    the endpoint lists none (404, not a list, an empty one), refuses the request, cannot be
    reached or does not answer within `timeout`. A model server that is down at start may
    come up later (until then a run fails MODEL_UNAVAILABLE), so that does not hold the
    start."""
    ms = ModelSettings()
    if not ms.check_endpoints:
        return
    seen: set[tuple[str | None, str]] = set()
    checks = []
    for name in card_names:
        card = resolve_card(settings, name or None, ms)
        if card.provider != "openai" or (card.base_url, card.model) in seen:
            continue
        seen.add((card.base_url, card.model))
        checks.append(_check_endpoint(settings, name or None, card, timeout))
    problems = [p for p in await asyncio.gather(*checks) if p]
    if problems:
        raise CardError("; ".join(problems))


async def _check_endpoint(
    settings: Settings, name: str | None, card: ModelCard, timeout: float
) -> str:
    """What stops the start for this card ("" when nothing does); warnings are logged."""
    # Here, not at the top: httpx is loaded for openai cards only (create_model says why).
    import httpx

    from shared.model.openai import OpenAIChatModel

    where = f"{card.base_url}/models"
    try:
        model = create_model(settings, name)
    except ModelError as err:
        log.warning("model card %s: not checked against %s: %s", card.name, where, err)
        return ""
    if not isinstance(model, OpenAIChatModel):  # an openai card makes one; nothing to ask
        return ""
    try:
        listed = await model.listed_models(timeout)
    except (httpx.HTTPError, TimeoutError, ModelError) as err:
        reason = f"cannot reach it ({type(err).__name__})"
        if isinstance(err, ModelError):
            reason = f"it answered {err}"
        elif isinstance(err, TimeoutError | httpx.TimeoutException):
            reason = f"no answer within {timeout:g}s"
        log.warning("model card %s: not checked against %s: %s", card.name, where, reason)
        return ""
    finally:
        await model.aclose()
    if listed is None:
        log.warning(
            "model card %s: not checked against %s: the endpoint lists no models",
            card.name,
            where,
        )
        return ""
    if card.model in listed:
        return ""
    shown = ", ".join(listed[:LISTED_SHOWN]) + (", ..." if len(listed) > LISTED_SHOWN else "")
    return (
        f"model card {card.name}: model: the endpoint {card.base_url} does not serve "
        f"{card.model!r} (it serves: {shown})"
    )
