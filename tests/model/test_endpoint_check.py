"""A card is checked against its endpoint's GET /v1/models at start (shared.model.factory
check_endpoints): a model the endpoint does not list stops the start naming the card; an
endpoint with no list, or one that cannot be reached, is only a warning."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
import yaml

from services.launcher import free_port
from shared.model.cards import CardError
from shared.model.factory import check_endpoints
from shared.settings import Settings
from tests.model.fake_openai import Reply, error, fake_openai

LISTED = {
    "object": "list",
    "data": [
        {"id": "smollm2-135m-instruct", "object": "model", "owned_by": "me"},
        {"id": "other-model", "object": "model", "owned_by": "me"},
    ],
}


def listing(body: object) -> Reply:
    return Reply(body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


@pytest.fixture
def cards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTMESH_MODEL_CARDS_DIR", str(tmp_path))
    monkeypatch.delenv("AGENTMESH_MODEL_CARD", raising=False)
    monkeypatch.delenv("AGENTMESH_MODEL_BASE_URL", raising=False)
    return tmp_path


def write(cards: Path, name: str, base_url: str, model: str = "smollm2-135m-instruct") -> None:
    card = {"name": name, "provider": "openai", "model": model, "base_url": base_url}
    card.update(context_size=2048, output_size=256, connect_timeout_seconds=1)
    (cards / f"{name}.yaml").write_text(yaml.safe_dump(card))


async def test_a_listed_model_passes_and_the_list_is_asked_with_the_cards_key(
    cards: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with fake_openai([listing(LISTED)]) as fake:
        write(cards, "local", fake.base_url)
        await check_endpoints(Settings(model_provider="openai"), ["local"])
    [request] = fake.requests
    assert request.path == "/v1/models"


async def test_a_model_the_endpoint_does_not_list_stops_the_start_naming_the_card(
    cards: Path,
) -> None:
    async with fake_openai([listing(LISTED)]) as fake:
        write(cards, "local", fake.base_url, model="smollm2-1.7b")
        with pytest.raises(CardError) as err:
            await check_endpoints(Settings(model_provider="openai"), ["local"])
    message = str(err.value)
    assert "model card local" in message and "'smollm2-1.7b'" in message
    assert fake.base_url in message and "smollm2-135m-instruct, other-model" in message


@pytest.mark.parametrize(
    "reply",
    [error(404, "Not Found"), listing({"unexpected": True}), listing({"data": []})],
    ids=["404", "not-a-list", "empty-list"],
)
async def test_an_endpoint_without_a_model_list_is_a_warning(
    cards: Path, caplog: pytest.LogCaptureFixture, reply: Reply
) -> None:
    caplog.set_level(logging.WARNING)
    async with fake_openai([reply]) as fake:
        write(cards, "local", fake.base_url)
        await check_endpoints(Settings(model_provider="openai"), ["local"])
    assert "model card local: not checked against" in caplog.text
    assert "lists no models" in caplog.text


async def test_an_unreachable_endpoint_is_a_warning_and_does_not_hold_the_start(
    cards: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    write(cards, "down", f"http://127.0.0.1:{free_port()}/v1")
    started = time.monotonic()
    await check_endpoints(Settings(model_provider="openai"), ["down"])
    assert time.monotonic() - started < 3
    assert "model card down: not checked against" in caplog.text
    assert "cannot reach" in caplog.text


async def test_a_silent_endpoint_is_given_up_within_the_check_timeout(
    cards: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with fake_openai([Reply(stall=30)]) as fake:
        write(cards, "silent", fake.base_url)
        started = time.monotonic()
        await check_endpoints(Settings(model_provider="openai"), ["silent"], timeout=0.5)
        assert time.monotonic() - started < 3
    assert "model card silent: not checked against" in caplog.text


async def test_the_scripted_provider_checks_nothing() -> None:
    await check_endpoints(Settings(), ["scripted"])


async def test_the_check_can_be_switched_off(cards: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_MODEL_CHECK_ENDPOINTS", "false")
    async with fake_openai([listing(LISTED)]) as fake:
        write(cards, "local", fake.base_url, model="not-served")
        await check_endpoints(Settings(model_provider="openai"), ["local"])
    assert fake.requests == []


async def test_an_endpoint_that_refuses_the_list_is_a_warning_naming_the_status(
    cards: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with fake_openai([error(401, "Incorrect API key provided: sk-echoed")]) as fake:
        write(cards, "local", fake.base_url)
        await check_endpoints(Settings(model_provider="openai"), ["local"])
    assert "model card local: not checked against" in caplog.text
    assert "it answered HTTP 401" in caplog.text and "sk-echoed" not in caplog.text
