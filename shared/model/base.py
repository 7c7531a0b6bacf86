"""What every model provider implements: a stream of ChatResponse chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from shared.errors import FailedPrecondition, Unavailable
from shared.messages import Block, Msg, Usage


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model: name, description, JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


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
    ) -> AsyncIterator[ChatResponse]:
        """Stream the model's response to `messages`, offering `tools`. `options` are
        per-call parameters, checked against the model card (ValueError naming the option)."""
        ...


class ModelError(Exception):
    """A model call failed. The message says why; it never contains an API key."""


class ModelUnavailable(ModelError, Unavailable):
    """The endpoint could not be reached, timed out, or kept failing (429/5xx) past the retries."""


class ModelRequestError(ModelError, FailedPrecondition):
    """The endpoint refused the request (bad key, unknown model, bad parameters) or broke the
    protocol; retrying will not help."""
