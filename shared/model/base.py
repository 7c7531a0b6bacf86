"""What every model provider implements: a stream of ChatResponse chunks."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from shared.errors import FailedPrecondition, Unavailable
from shared.messages import Block, Msg, Usage


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model: name, description, JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


@dataclass(frozen=True)
class OutputSchema:
    """Structured output: the answer must be one JSON document matching `schema` (a JSON
    Schema). How it is asked for is the card's `structured_output` (shared.model.cards)."""

    name: str
    schema: Mapping[str, Any]
    # What a grammar-constrained server (structured_output json_object_schema) is given
    # instead: the same document with its strings and lists bounded (maxLength, maxItems),
    # so that a small model's answer closes before the output limit. Strict json_schema
    # endpoints take no length keywords, so `schema` stays without them.
    grammar_schema: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ChatResponse:
    """One streamed chunk of a model's response.

    `content` holds the chunk's deltas as blocks (a text block with the new text, a tool
    call block with the new fragment of its JSON input, ...); blocks merge by type (see
    shared.model.merge). `is_last` with `finished_reason` ends the response; `usage` is the
    call's usage when the provider reports it (usually on the last chunk).
    """

    content: tuple[Block, ...] = ()
    is_last: bool = False
    finished_reason: str = ""
    usage: Usage | None = None


class ChatModel(Protocol):
    name: str

    def stream(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec] = (),
        options: Mapping[str, Any] | None = None,
        output_schema: OutputSchema | None = None,
    ) -> AsyncGenerator[ChatResponse, None]:
        """Stream the model's response to `messages`, offering `tools`. `options` are
        per-call parameters, checked against the model card (ValueError naming the option).
        `output_schema`: the answer is one JSON document of that schema, streamed as text."""
        ...


class ModelError(Exception):
    """A model call failed. The message says why; it never contains an API key or prompt text.

    Each kind has its own reason, which becomes the RUN_ERROR code (sse-events.md). The
    transient kinds are ModelUnavailable's (the gRPC edge says UNAVAILABLE; the run's
    message says "try again"); the others are FailedPrecondition's: retrying the same call
    would fail the same way, so nothing retries them and their message says what to change."""

    # The kinds below are DomainErrors, which set their own; a provider's bare ModelError
    # still has one for the callers that log it.
    reason: str = "MODEL_ERROR"


class ModelUnavailable(ModelError, Unavailable):
    """The endpoint could not be reached or kept failing (5xx) past the retries."""

    default_reason = "MODEL_UNAVAILABLE"


class ModelTimeout(ModelUnavailable):
    """The endpoint did not answer, or went silent mid-stream, within the card's timeouts."""

    default_reason = "MODEL_TIMEOUT"


class ModelRateLimited(ModelUnavailable):
    """The endpoint kept answering 429 past the retries."""

    default_reason = "MODEL_RATE_LIMITED"


class ModelStreamBroken(ModelUnavailable):
    """The stream was cut (connection lost, or ended before the response finished)."""

    default_reason = "MODEL_STREAM_BROKEN"


class ModelRequestError(ModelError, FailedPrecondition):
    """The endpoint refused the request (unknown model, bad parameters, ...); retrying will
    not help."""

    default_reason = "MODEL_INVALID_REQUEST"


class ModelAuthError(ModelRequestError):
    """The API key is missing, wrong or not allowed to use the model (401/403)."""

    default_reason = "MODEL_AUTHENTICATION"


class ModelContextOverflow(ModelRequestError):
    """The request does not fit the model's context window."""

    default_reason = "MODEL_CONTEXT_OVERFLOW"


class ModelBadResponse(ModelRequestError):
    """The endpoint broke the protocol: a stream event that is not JSON or not the shape of
    a chat-completions chunk."""

    default_reason = "MODEL_BAD_RESPONSE"
