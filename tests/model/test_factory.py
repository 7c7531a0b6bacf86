"""Provider and card selection by configuration (shared.model.factory)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shared.messages import user
from shared.model.cards import CardError
from shared.model.factory import create_model
from shared.model.merge import collect
from shared.model.openai import OpenAIChatModel
from shared.model.scripted import ScriptedModel
from shared.settings import Settings
from tests.model.fake_openai import fake_openai, recording


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CARD", "CARDS_DIR", "PARAMETERS", "API_KEY_FILE", "BASE_URL"):
        monkeypatch.delenv(f"AGENTMESH_MODEL_{name}", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_default_is_the_scripted_model_with_the_settings_latency() -> None:
    model = create_model(Settings(scripted_token_latency=0.25))
    assert isinstance(model, ScriptedModel)
    assert model.token_latency == 0.25 and model.card is not None and model.card.name == "scripted"


def test_openai_provider_with_a_card_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_MODEL_CARD", "llama3.1-ollama")
    model = create_model(Settings(model_provider="openai"))
    assert isinstance(model, OpenAIChatModel) and model.name == "llama3.1-ollama"


def test_base_url_from_the_environment_replaces_the_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_MODEL_CARD", "smollm2-local")
    monkeypatch.setenv("AGENTMESH_MODEL_BASE_URL", "http://127.0.0.1:9999/v1")
    model = create_model(Settings(model_provider="openai"))
    assert isinstance(model, OpenAIChatModel)
    assert model.card.base_url == "http://127.0.0.1:9999/v1"
    assert model.card.context_size == 2048 and model.card.resolve_parameters()["max_tokens"] == 200


def test_a_base_url_that_is_not_http_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTMESH_MODEL_CARD", "smollm2-local")
    monkeypatch.setenv("AGENTMESH_MODEL_BASE_URL", "127.0.0.1:9999")
    with pytest.raises(
        CardError, match="AGENTMESH_MODEL_BASE_URL: must start with http:// or https://"
    ):
        create_model(Settings(model_provider="openai"))


def test_a_hosted_card_keeps_its_own_host_and_key_with_the_deployment_base_url_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # make run MODEL=local sets AGENTMESH_MODEL_BASE_URL; a profile naming gpt-4o-mini must
    # still reach OpenAI with OpenAI's key (issue 32).
    monkeypatch.setenv("AGENTMESH_MODEL_CARD", "smollm2-local")
    monkeypatch.setenv("AGENTMESH_MODEL_BASE_URL", "http://127.0.0.1:9999/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-only")
    hosted = create_model(Settings(model_provider="openai"), card_name="gpt-4o-mini")
    local = create_model(Settings(model_provider="openai"))
    assert isinstance(hosted, OpenAIChatModel) and isinstance(local, OpenAIChatModel)
    assert hosted.card.base_url == "https://api.openai.com/v1"
    assert local.card.base_url == "http://127.0.0.1:9999/v1"


async def test_each_card_reaches_its_own_host_with_its_own_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two cards of one deployment, each on its own fake endpoint: the one that follows the
    deployment's base URL goes there keyless, the hosted one to its own host with its key."""
    async with (
        fake_openai([recording("text.sse")]) as local,
        fake_openai([recording("text.sse")]) as hosted,
    ):
        for name, base_url, extra in (
            ("local", "http://127.0.0.1:1/v1", {"base_url_env": "AGENTMESH_MODEL_BASE_URL"}),
            ("hosted", hosted.base_url, {"api_key_env": "HOSTED_KEY"}),
        ):
            card = {"name": name, "provider": "openai", "model": f"{name}-model"}
            card.update(base_url=base_url, context_size=8000, output_size=500, **extra)
            (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(card))
        monkeypatch.setenv("AGENTMESH_MODEL_CARDS_DIR", str(tmp_path))
        monkeypatch.setenv("AGENTMESH_MODEL_CARD", "local")
        monkeypatch.setenv("AGENTMESH_MODEL_BASE_URL", local.base_url)
        monkeypatch.setenv("HOSTED_KEY", "sk-hosted-secret")
        settings = Settings(model_provider="openai")
        for card_name in ("local", "hosted"):
            model = create_model(settings, card_name)
            assert isinstance(model, OpenAIChatModel)
            await collect(model.stream([user("hi")]))
            await model.aclose()
    [to_local], [to_hosted] = local.requests, hosted.requests
    assert to_local.body["model"] == "local-model" and "authorization" not in to_local.headers
    assert to_hosted.body["model"] == "hosted-model"
    assert to_hosted.headers["authorization"] == "Bearer sk-hosted-secret"


def test_the_deployment_key_file_is_the_deployment_cards_key_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "local.key"
    secret.write_text("sk-local-file\n")
    monkeypatch.setenv("AGENTMESH_MODEL_CARD", "smollm2-local")
    monkeypatch.setenv("AGENTMESH_MODEL_API_KEY_FILE", str(secret))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-only")
    hosted = create_model(Settings(model_provider="openai"), card_name="gpt-4o-mini")
    local = create_model(Settings(model_provider="openai"))
    assert isinstance(hosted, OpenAIChatModel) and isinstance(local, OpenAIChatModel)
    assert hosted._headers["Authorization"] == "Bearer sk-openai-only"
    assert local._headers["Authorization"] == "Bearer sk-local-file"


def test_card_name_argument_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_MODEL_CARD", "qwen-plus")
    model = create_model(Settings(model_provider="openai"), card_name="llama3.1-ollama")
    assert model.name == "llama3.1-ollama"


def test_openai_provider_without_a_card_fails_clearly() -> None:
    with pytest.raises(CardError, match="the openai provider needs a model card"):
        create_model(Settings(model_provider="openai"))


def test_card_of_another_provider_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_MODEL_CARD", "gpt-4o-mini")
    with pytest.raises(
        CardError,
        match="gpt-4o-mini is for the openai provider but AGENTMESH_MODEL_PROVIDER is scripted",
    ):
        create_model(Settings())


def test_unknown_provider_fails_clearly() -> None:
    with pytest.raises(CardError, match="'anthropic' is not one of"):
        create_model(Settings(model_provider="anthropic"))


def test_user_parameter_overrides_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_MODEL_PARAMETERS", '{"thinking": {"default": true}}')
    model = create_model(Settings())
    assert isinstance(model, ScriptedModel) and model.card is not None
    assert model.card.resolve_parameters() == {"thinking": True}


def test_unknown_parameter_override_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMESH_MODEL_PARAMETERS", '{"temperature": null}')
    with pytest.raises(
        CardError, match=r"overrides\.temperature: unknown parameter of the scripted provider"
    ):
        create_model(Settings())


def test_api_key_from_the_secret_file_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "openai.key"
    secret.write_text("sk-from-file\n")
    monkeypatch.setenv("AGENTMESH_MODEL_CARD", "gpt-4o-mini")
    monkeypatch.setenv("AGENTMESH_MODEL_API_KEY_FILE", str(secret))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = create_model(Settings(model_provider="openai"))
    assert isinstance(model, OpenAIChatModel)
    assert "sk-from-file" not in repr(model)


def test_card_from_a_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nprovider: scripted\nmodel: s\ncontext_size: 10\noutput_size: 5\n")
    monkeypatch.setenv("AGENTMESH_MODEL_CARD", str(path))
    model = create_model(Settings())
    assert isinstance(model, ScriptedModel) and model.card is not None and model.card.name == "mine"
