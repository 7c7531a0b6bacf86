"""Model cards: the three-layer parameter cascade and load-time validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.model.cards import CARDS_DIR, CardError, ModelCard, load_card, load_cards


def write_card(tmp_path: Path, **fields: Any) -> Path:
    data: dict[str, Any] = {
        "name": "test-model",
        "provider": "openai",
        "model": "m",
        "base_url": "http://127.0.0.1:1/v1",
        "context_size": 8000,
        "output_size": 1000,
        "output_types": ["text", "tool_call"],
    }
    data.update(fields)
    path = tmp_path / "card.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_every_shipped_card_loads() -> None:
    cards = load_cards(CARDS_DIR)
    assert {"scripted", "gpt-4o-mini", "qwen-plus", "llama3.1-ollama", "o4-mini"} <= set(cards)


def test_layer_one_offers_the_provider_class_parameters(tmp_path: Path) -> None:
    card = load_card(write_card(tmp_path))
    assert {"temperature", "top_p", "max_tokens", "seed", "stop"} <= set(card.parameter_properties)
    assert card.parameter_properties["temperature"] == {
        "type": "number",
        "minimum": 0,
        "maximum": 2,
        "title": "Temperature",
    }


def test_thinking_parameters_are_removed_without_thinking_output(tmp_path: Path) -> None:
    card = load_card(write_card(tmp_path))
    assert not {"reasoning_effort", "enable_thinking", "thinking_budget"} & set(
        card.parameter_properties
    )


def test_thinking_parameters_stay_with_thinking_output(tmp_path: Path) -> None:
    card = load_card(write_card(tmp_path, output_types=["text", "thinking"]))
    assert "reasoning_effort" in card.parameter_properties
    assert "tool_choice" not in card.parameter_properties  # no tool_call output declared


def test_max_tokens_maximum_is_the_output_size(tmp_path: Path) -> None:
    card = load_card(write_card(tmp_path, output_size=1234))
    assert card.parameter_properties["max_tokens"]["maximum"] == 1234


def test_null_override_removes_a_parameter(tmp_path: Path) -> None:
    card = load_card(write_card(tmp_path, parameters={"temperature": None}))
    assert "temperature" not in card.parameter_properties


def test_hidden_override_removes_a_parameter(tmp_path: Path) -> None:
    card = load_card(write_card(tmp_path, parameters={"seed": {"hidden": True}}))
    assert "seed" not in card.parameter_properties


def test_mapping_override_merges_into_the_parameter(tmp_path: Path) -> None:
    card = load_card(
        write_card(tmp_path, parameters={"temperature": {"default": 0.5, "maximum": 1}})
    )
    assert card.parameter_properties["temperature"] == {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
        "title": "Temperature",
        "default": 0.5,
    }


def test_overriding_an_unknown_parameter_fails_naming_it(tmp_path: Path) -> None:
    with pytest.raises(
        CardError, match=r"parameters\.temprature: unknown parameter of the openai provider"
    ):
        load_card(write_card(tmp_path, parameters={"temprature": {"default": 1}}))


def test_overriding_a_gated_parameter_fails_naming_the_capability(tmp_path: Path) -> None:
    with pytest.raises(
        CardError, match=r"parameters\.reasoning_effort: not available: .* thinking output"
    ):
        load_card(write_card(tmp_path, parameters={"reasoning_effort": {"default": "low"}}))


def test_override_default_outside_the_bounds_fails(tmp_path: Path) -> None:
    with pytest.raises(CardError, match=r"parameters\.temperature\.default: "):
        load_card(write_card(tmp_path, parameters={"temperature": {"default": 3}}))


def test_override_default_of_the_wrong_type_fails(tmp_path: Path) -> None:
    with pytest.raises(CardError, match=r"parameters\.max_tokens\.default: "):
        load_card(write_card(tmp_path, parameters={"max_tokens": {"default": "lots"}}))


def test_override_with_an_unknown_key_fails(tmp_path: Path) -> None:
    with pytest.raises(CardError, match=r"parameters\.temperature\.maxmum: not an overridable key"):
        load_card(write_card(tmp_path, parameters={"temperature": {"maxmum": 1}}))


def test_override_that_is_not_a_mapping_fails(tmp_path: Path) -> None:
    with pytest.raises(CardError, match=r"parameters\.temperature: must be a mapping"):
        load_card(write_card(tmp_path, parameters={"temperature": 0.5}))


def test_max_tokens_maximum_cannot_exceed_the_output_size(tmp_path: Path) -> None:
    with pytest.raises(CardError, match=r"parameters\.max_tokens\.maximum: exceeds"):
        load_card(write_card(tmp_path, parameters={"max_tokens": {"maximum": 5000}}))


def test_invalid_card_field_fails_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(
        CardError, match=r"card\.yaml: context_size: Input should be greater than 0"
    ):
        load_card(write_card(tmp_path, context_size=0))


def test_unknown_card_field_fails_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CardError, match=r"contxt_size: Extra inputs are not permitted"):
        load_card(write_card(tmp_path, contxt_size=5))


def test_openai_card_without_base_url_fails(tmp_path: Path) -> None:
    with pytest.raises(CardError, match="base_url: required for an openai card"):
        load_card(write_card(tmp_path, base_url=None))


def test_missing_card_names_the_available_ones() -> None:
    with pytest.raises(CardError, match=r"no file .*available: .*scripted"):
        load_card("no-such-model")


def test_user_overrides_apply_on_top_of_the_card(tmp_path: Path) -> None:
    card = load_card(write_card(tmp_path), overrides={"top_p": None, "seed": {"default": 7}})
    assert "top_p" not in card.parameter_properties
    assert card.resolve_parameters() == {"seed": 7}


def test_unknown_user_override_fails_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CardError, match=r"overrides\.nope: unknown parameter"):
        load_card(write_card(tmp_path), overrides={"nope": None})


def test_call_options_override_defaults_and_are_checked() -> None:
    card = load_card("gpt-4o-mini")
    assert card.resolve_parameters({"temperature": 1.0}) == {"temperature": 1.0, "max_tokens": 2048}
    with pytest.raises(ValueError, match=r"options\.max_tokens: maximum is 16384"):
        card.resolve_parameters({"max_tokens": 100_000})
    with pytest.raises(ValueError, match=r"options\.reasoning_effort: not a parameter"):
        card.resolve_parameters({"reasoning_effort": "low"})


def test_card_is_a_validated_pydantic_model() -> None:
    card = ModelCard(name="x", provider="scripted", model="s", context_size=10, output_size=5)
    assert card.supports("text") and not card.supports("thinking")


def test_the_local_card_refuses_a_tool_choice_up_front() -> None:
    local = load_card("smollm2-local")
    assert "tool_choice" not in local.resolve_parameters()
    with pytest.raises(
        ValueError, match=r"options\.tool_choice: not a parameter of model card smollm2-local"
    ):
        local.resolve_parameters({"tool_choice": "required"})
    with pytest.raises(CardError, match=r"tool_choice: unknown parameter"):
        load_card("smollm2-local", overrides={"tool_choice": {"default": "required"}})


def test_structured_memory_extraction_needs_a_way_to_ask_for_it(tmp_path: Path) -> None:
    needs = r"card\.yaml: memory_extraction: structured needs structured_output"
    with pytest.raises(CardError, match=needs):
        load_card(write_card(tmp_path, memory_extraction="structured"))
    with pytest.raises(CardError, match=r"structured_output: Input should be 'none', 'json_sch"):
        load_card(write_card(tmp_path, structured_output="grammar"))
    with pytest.raises(CardError, match=r"memory_extraction: Input should be 'tool_call' or"):
        load_card(write_card(tmp_path, memory_extraction="prose"))
    card = load_card(
        write_card(tmp_path, structured_output="json_schema", memory_extraction="structured")
    )
    assert (card.structured_output, card.memory_extraction) == ("json_schema", "structured")
    plain = load_card(write_card(tmp_path))
    assert (plain.structured_output, plain.memory_extraction) == ("none", "tool_call")


def test_the_local_card_extracts_memories_with_llama_cpp_s_schema_grammar() -> None:
    card = load_card("smollm2-local")
    assert (card.structured_output, card.memory_extraction) == ("json_object_schema", "structured")


def test_base_url_env_must_name_an_environment_variable(tmp_path: Path) -> None:
    with pytest.raises(CardError, match="base_url_env: String should match pattern"):
        load_card(write_card(tmp_path, base_url_env="not a name"))


def test_only_an_openai_card_can_follow_a_base_url_variable(tmp_path: Path) -> None:
    path = write_card(tmp_path, provider="scripted", base_url_env="SOME_URL")
    with pytest.raises(CardError, match="base_url_env: only an openai card has an endpoint"):
        load_card(path)


def test_hosted_cards_follow_no_deployment_base_url_and_self_hosted_ones_do() -> None:
    cards = load_cards(CARDS_DIR)
    for name in ("gpt-4o-mini", "o4-mini", "qwen-plus"):
        assert cards[name].base_url_env is None, name
    for name in ("smollm2-local", "qwen2.5-vllm", "llama3.1-ollama"):
        assert cards[name].base_url_env == "AGENTMESH_MODEL_BASE_URL", name


def test_only_an_openai_card_can_name_an_endpoint_tokenizer(tmp_path: Path) -> None:
    path = write_card(tmp_path, provider="scripted", tokenizer="llama_cpp_python")
    with pytest.raises(CardError, match="tokenizer: only an openai card has an endpoint to ask"):
        load_card(path)
    with pytest.raises(CardError, match="tokenizer: Input should be"):
        load_card(write_card(tmp_path, tokenizer="tiktoken"))


def test_the_local_card_counts_with_the_servers_tokenizer() -> None:
    assert load_card("smollm2-local").tokenizer == "llama_cpp_python"
    assert load_card("gpt-4o-mini").tokenizer == "estimate"
