"""Model cards: what a model is (provider, model id, sizes, capabilities, endpoint) and the
parameters a caller may set, loaded from YAML (models/*.yaml) and validated at load.

The parameter schema cascades through three layers, each owned by a different actor:

1. the provider's parameter class (developers): a pydantic class per provider, whose
   model_json_schema() properties are the parameters the API understands;
2. capability gating (this module): parameters marked `x-requires: <capability>` are
   removed unless the card's output_types declare it (thinking parameters need "thinking",
   tool-choice parameters "tool_call"); max_tokens' maximum becomes the card's output_size;
3. the user's overrides (the card's `parameters:` mapping, then any overrides passed to
   load_card): null or `{hidden: true}` removes a parameter; a mapping merges into an
   existing parameter only (default, minimum, maximum, enum, description, ...). Overriding
   a parameter the provider does not have, or one gating removed, fails.

A parameter with a `default` in the final schema is sent on every call; a call's options
(validated by `ModelCard.resolve_parameters`) override it. An invalid card or override fails
at load with CardError naming the file and the field.
"""

from __future__ import annotations

import copy
import operator
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

CARDS_DIR = Path(__file__).resolve().parents[2] / "models"

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

Capability = Literal["text", "thinking", "tool_call", "image", "audio"]
InputType = Literal["text", "image", "audio", "video", "document"]


class CardError(ValueError):
    """A model card or an override is invalid; the message names the file and the field."""


def _requires(capability: str) -> dict[str, Any]:
    return {"x-requires": capability}


class ScriptedParameters(BaseModel):
    """Parameters of the offline scripted model."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(None, ge=1, description="Stop after this many tokens.")
    token_latency: float | None = Field(
        None, ge=0, le=10, description="Simulated latency per streamed token, in seconds."
    )
    first_token_latency: float | None = Field(
        None,
        ge=0,
        le=60,
        description="Simulated time to the first streamed token, in seconds (0: as any token).",
    )
    thinking: bool | None = Field(
        None,
        description="Stream a short reasoning before the reply.",
        json_schema_extra=_requires("thinking"),
    )


class OpenAIParameters(BaseModel):
    """Parameters of an OpenAI-compatible /v1/chat/completions endpoint."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    stop: list[str] | None = Field(None, max_length=4)
    tool_choice: Literal["auto", "none", "required"] | None = Field(
        None, json_schema_extra=_requires("tool_call")
    )
    parallel_tool_calls: bool | None = Field(None, json_schema_extra=_requires("tool_call"))
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = Field(
        None, description="OpenAI reasoning models.", json_schema_extra=_requires("thinking")
    )
    enable_thinking: bool | None = Field(
        None, description="Qwen3 on DashScope / vLLM.", json_schema_extra=_requires("thinking")
    )
    thinking_budget: int | None = Field(None, ge=1, json_schema_extra=_requires("thinking"))


PARAMETER_CLASSES: dict[str, type[BaseModel]] = {
    "scripted": ScriptedParameters,
    "openai": OpenAIParameters,
}

OVERRIDE_KEYS = frozenset(
    {
        "default",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "enum",
        "description",
        "title",
        "examples",
        "hidden",
    }
)


def provider_properties(provider: str) -> dict[str, dict[str, Any]]:
    """Layer 1: the provider class's JSON Schema properties, optional-ness folded away
    (every parameter is optional; "null" is not a value a caller sends)."""
    schema = PARAMETER_CLASSES[provider].model_json_schema()
    out: dict[str, dict[str, Any]] = {}
    for name, prop in schema["properties"].items():
        prop = copy.deepcopy(prop)
        branches = [b for b in prop.pop("anyOf", []) if b.get("type") != "null"]
        if len(branches) == 1:
            prop = {**branches[0], **prop}
        elif branches:
            prop["anyOf"] = branches
        if prop.get("default", 0) is None:
            del prop["default"]
        out[name] = prop
    return out


def gate(
    properties: dict[str, dict[str, Any]], output_types: list[str], output_size: int
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Layer 2: drop parameters whose capability the card lacks (returned: name ->
    capability), cap max_tokens at output_size, strip the markers."""
    kept: dict[str, dict[str, Any]] = {}
    removed: dict[str, str] = {}
    for name, prop in properties.items():
        prop = dict(prop)
        needs = prop.pop("x-requires", None)
        if needs is not None and needs not in output_types:
            removed[name] = needs
            continue
        kept[name] = prop
    if "max_tokens" in kept:
        kept["max_tokens"]["maximum"] = output_size
    return kept, removed


def apply_overrides(
    properties: dict[str, dict[str, Any]],
    overrides: dict[str, Any],
    *,
    provider: str,
    removed: dict[str, str],
    output_size: int,
    where: str,
) -> dict[str, dict[str, Any]]:
    """Layer 3: the user's overrides; ValueError naming `where`.<parameter>[.<key>]."""
    out = {name: dict(prop) for name, prop in properties.items()}
    for name, override in overrides.items():
        field = f"{where}.{name}"
        if name in removed:
            raise ValueError(
                f"{field}: not available: the card does not declare {removed[name]} output"
            )
        if name not in out:
            known = ", ".join(sorted(out))
            raise ValueError(
                f"{field}: unknown parameter of the {provider} provider (known: {known})"
            )
        if override is None:
            del out[name]
            continue
        if not isinstance(override, dict):
            raise ValueError(f"{field}: must be a mapping, null or {{hidden: true}}")
        unknown = set(override) - OVERRIDE_KEYS
        if unknown:
            keys = ", ".join(sorted(OVERRIDE_KEYS))
            raise ValueError(f"{field}.{sorted(unknown)[0]}: not an overridable key ({keys})")
        hidden = override.get("hidden", False)
        if not isinstance(hidden, bool):
            raise ValueError(f"{field}.hidden: must be true or false")
        if hidden:
            del out[name]
            continue
        merged = {**out[name], **{k: v for k, v in override.items() if k != "hidden"}}
        if name == "max_tokens" and merged.get("maximum", output_size) > output_size:
            raise ValueError(f"{field}.maximum: exceeds the card's output_size {output_size}")
        if "default" in merged:
            problem = check_value(provider, name, merged, merged["default"])
            if problem:
                raise ValueError(f"{field}.default: {problem}")
        out[name] = merged
    return out


def check_value(provider: str, name: str, prop: dict[str, Any], value: Any) -> str:
    """Why `value` is not valid for parameter `name` ("" when it is): the provider class's
    types and bounds, then the (possibly narrowed) schema bounds."""
    try:
        PARAMETER_CLASSES[provider].model_validate({name: value})
    except ValidationError as e:
        return e.errors()[0]["msg"]
    if value is None:
        return "must not be null"
    if "enum" in prop and value not in prop["enum"]:
        return f"must be one of {prop['enum']}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        for key, ok in (
            ("minimum", operator.ge),
            ("maximum", operator.le),
            ("exclusiveMinimum", operator.gt),
            ("exclusiveMaximum", operator.lt),
        ):
            if key in prop and not ok(value, prop[key]):
                return f"{key} is {prop[key]}, got {value}"
    return ""


def _text_inputs() -> list[InputType]:
    return ["text"]


def _text_outputs() -> list[Capability]:
    return ["text"]


class ModelCard(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    provider: Literal["scripted", "openai"]
    # The provider's model id ("gpt-4o-mini", "qwen-plus", "llama3.1:8b", ...).
    model: str = Field(min_length=1)
    description: str = ""
    status: Literal["active", "deprecated"] = "active"
    context_size: int = Field(gt=0)
    output_size: int = Field(gt=0)
    input_types: list[InputType] = Field(default_factory=_text_inputs, min_length=1)
    output_types: list[Capability] = Field(default_factory=_text_outputs, min_length=1)
    # OpenAI-compatible endpoint: base URL up to and including /v1.
    base_url: str | None = Field(None, pattern=r"^https?://")
    # The environment variable that, when set, replaces base_url: the card opts in to being
    # moved (the same model served on another host or port). A card without one is never
    # moved, so its requests and its key go to its own host only (docs/model-endpoints.md).
    base_url_env: str | None = Field(None, pattern=ENV_NAME)
    # Where the API key comes from: an environment variable's name, or a file (first line).
    api_key_env: str | None = Field(None, pattern=ENV_NAME)
    api_key_file: Path | None = None
    # How the context budget counts tokens: "estimate" (shared.model.tokens' deliberately
    # high rule), or the endpoint's own tokenizer: "llama_cpp_python" (POST
    # /extras/tokenize/count) or "llama_cpp" (llama-server's POST /tokenize), the estimate
    # staying the fallback when the endpoint does not answer.
    tokenizer: Literal["estimate", "llama_cpp_python", "llama_cpp"] = "estimate"
    timeout_seconds: float = Field(60.0, gt=0)
    connect_timeout_seconds: float = Field(5.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    # Layer 3 of the cascade: the card's overrides of the provider's parameters.
    parameters: dict[str, Any] = Field(default_factory=dict)
    # How the endpoint is asked for an answer that is one JSON document of a JSON Schema:
    # "json_schema" (response_format {"type": "json_schema", "json_schema": {...}}: OpenAI,
    # vLLM, Ollama's /v1), "json_object_schema" ({"type": "json_object",
    # "schema": ...}: llama-cpp-python's server, which turns the schema into a grammar), or
    # "none" (it cannot be).
    structured_output: Literal["none", "json_schema", "json_object_schema"] = "none"
    # How the memory agent has this model extract memories: "tool_call" (it calls
    # memory_write / memory_forget) or "structured" (it answers one JSON document of the
    # memories to save and forget; for models that do not call tools).
    memory_extraction: Literal["tool_call", "structured"] = "tool_call"

    _schema: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)
    _removed: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _cascade(self) -> ModelCard:
        if self.provider == "openai" and self.base_url is None:
            raise ValueError("base_url: required for an openai card")
        if self.provider != "openai" and self.base_url_env is not None:
            raise ValueError("base_url_env: only an openai card has an endpoint")
        if self.provider != "openai" and self.tokenizer != "estimate":
            raise ValueError("tokenizer: only an openai card has an endpoint to ask")
        if self.memory_extraction == "structured" and self.structured_output == "none":
            raise ValueError(
                "memory_extraction: structured needs structured_output "
                "(json_schema or json_object_schema)"
            )
        properties = provider_properties(self.provider)
        gated, removed = gate(properties, list(self.output_types), self.output_size)
        self._removed = removed
        self._schema = apply_overrides(
            gated,
            self.parameters,
            provider=self.provider,
            removed=removed,
            output_size=self.output_size,
            where="parameters",
        )
        return self

    @property
    def parameter_properties(self) -> dict[str, dict[str, Any]]:
        """The final parameter schema's properties (after the cascade)."""
        return copy.deepcopy(self._schema)

    @property
    def parameter_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": self.parameter_properties,
            "additionalProperties": False,
        }

    def supports(self, capability: str) -> bool:
        return capability in self.output_types

    def with_overrides(self, overrides: dict[str, Any], *, where: str = "overrides") -> ModelCard:
        """This card with further user overrides on top of its schema (same rules)."""
        card = self.model_copy()
        card._removed = dict(self._removed)
        card._schema = apply_overrides(
            self._schema,
            overrides,
            provider=self.provider,
            removed=self._removed,
            output_size=self.output_size,
            where=where,
        )
        return card

    def resolve_parameters(self, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """The parameters of one call: the schema's defaults, then `options`; ValueError
        naming options.<name> for a parameter the card does not offer or a bad value."""
        values = {name: prop["default"] for name, prop in self._schema.items() if "default" in prop}
        for name, value in (options or {}).items():
            if name not in self._schema:
                raise ValueError(f"options.{name}: not a parameter of model card {self.name}")
            problem = check_value(self.provider, name, self._schema[name], value)
            if problem:
                raise ValueError(f"options.{name}: {problem}")
            values[name] = value
        return values


def _describe(error: ValidationError) -> str:
    parts = []
    for e in error.errors():
        msg = e["msg"].removeprefix("Value error, ")
        loc = ".".join(str(p) for p in e["loc"])
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def card_path(source: str | Path, cards_dir: Path = CARDS_DIR) -> Path:
    """A card's file: `source` as a path when it looks like one, else <cards_dir>/<source>.yaml."""
    path = Path(source)
    if path.suffix in (".yaml", ".yml") or path.parent != Path("."):
        return path
    return cards_dir / f"{source}.yaml"


def load_card(
    source: str | Path, *, cards_dir: Path = CARDS_DIR, overrides: dict[str, Any] | None = None
) -> ModelCard:
    """Load and validate a card by name (models/<name>.yaml) or path; CardError otherwise."""
    path = card_path(source, cards_dir)
    if not path.is_file():
        names = sorted(p.stem for p in cards_dir.glob("*.yaml")) if cards_dir.is_dir() else []
        raise CardError(
            f"model card {source!s}: no file {path} (available: {', '.join(names) or 'none'})"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise CardError(f"{path}: not YAML: {e}") from None
    if not isinstance(data, dict):
        raise CardError(f"{path}: a model card is a mapping")
    try:
        card = ModelCard.model_validate(data)
        return card.with_overrides(overrides) if overrides else card
    except ValidationError as e:
        raise CardError(f"{path}: {_describe(e)}") from None
    except ValueError as e:
        raise CardError(f"{path}: {e}") from None


def load_cards(cards_dir: Path = CARDS_DIR) -> dict[str, ModelCard]:
    """Every card in `cards_dir` by name; the first invalid one fails the whole load."""
    cards = {}
    for path in sorted(cards_dir.glob("*.yaml")):
        card = load_card(path)
        if card.name in cards:
            raise CardError(f"{path}: name: {card.name} is already used by another card")
        cards[card.name] = card
    return cards
