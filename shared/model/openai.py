"""A ChatModel for any OpenAI-compatible /v1/chat/completions endpoint (OpenAI, vLLM,
Ollama's /v1, DashScope's compatible mode), streamed over httpx, its server-sent events
read by httpx-sse.

- Text deltas become TextBlocks; `reasoning_content` (DashScope, DeepSeek, vLLM) or
  `reasoning` deltas become ThinkingBlocks; tool-call fragments are keyed by their index
  (the id and name come once, the arguments in pieces split anywhere, even mid-JSON) and
  become ToolCallBlock deltas with the call's id; usage comes from the final chunk
  (stream_options.include_usage).
- One connection, kept: the model's httpx client lives as long as the model, and a stream
  is read to its very end after [DONE] (drain_after_done) so its connection goes back to
  the pool for the next call. httpx closes a connection whose response was closed unread,
  and a new one per call cost 1-2 ms of every run's time to first text on a local server.
- Timeouts: connect_timeout_seconds to connect, timeout_seconds for any single read, so a
  silent endpoint fails with ModelUnavailable instead of hanging.
- Retries: 429 and 5xx responses and connection failures are retried with exponential
  backoff (honouring Retry-After up to 30 s), at most card.max_retries times, and only
  before any output was streamed; a stream that breaks after output fails with ModelError.
  A 5xx that refuses the request itself (a context overflow, a validation error:
  final_refusal) is final at once: the same request would be refused again.
- The API key comes from the environment variable the card names (api_key_env) or a
  secret file (api_key_file, or the one the factory passes); it is sent as a bearer token
  and never logged or put in an error message.
- Failures, each its own ModelError (shared.model.base) and RUN_ERROR code: transient
  (UNAVAILABLE at the gRPC edge) MODEL_UNAVAILABLE (cannot connect, 5xx), MODEL_TIMEOUT,
  MODEL_RATE_LIMITED (429), MODEL_STREAM_BROKEN (cut mid-stream); final
  (FAILED_PRECONDITION) MODEL_CONTEXT_OVERFLOW (classify_refusal: OpenAI's
  context_length_exceeded, llama.cpp's "exceed context window", ...), MODEL_AUTHENTICATION
  (401/403), MODEL_INVALID_REQUEST (other 4xx, a 5xx whose body is a validation error, an
  unknown model), MODEL_BAD_RESPONSE (a chunk that is not JSON or not a chunk). A refusal
  reported inside a 200 stream (an `error` object, or llama.cpp's `error:` field) is
  classified the same way; a 200 stream dropped before any output (llama-cpp-python refuses
  a too-long prompt so: 200, no event, the connection closed) is asked again once,
  unstreamed for one token, to hear the refusal. Messages name the card, never the key or
  the prompt.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import ServerSentEvent

# What EventSource.aiter_sse is made of, to read llama.cpp's `error:` field beside the
# standard's (sse_events): private names of the pinned version, which tests/model pins.
from httpx_sse._api import _aiter_sse_lines
from httpx_sse._decoders import SSEDecoder
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from shared.messages import (
    DataBlock,
    HintBlock,
    Msg,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolInputError,
    ToolResultBlock,
    Usage,
)
from shared.model.base import (
    ChatResponse,
    ModelAuthError,
    ModelBadResponse,
    ModelContextOverflow,
    ModelError,
    ModelRateLimited,
    ModelRequestError,
    ModelStreamBroken,
    ModelTimeout,
    ModelUnavailable,
    OutputSchema,
    ToolSpec,
)
from shared.model.cards import ModelCard
from shared.text import storable

log = logging.getLogger(__name__)

RETRY_AFTER_CAP = 30.0
# The texts whose token counts a model keeps (a thread's messages are counted once, not at
# every turn), and how many it asks its endpoint to count at once.
TOKEN_CACHE_SIZE = 4096
TOKENIZE_CONCURRENCY = 4
# How long counting a call's texts may take before the estimate is used instead.
TOKENIZE_SECONDS = 5.0
# How long what follows [DONE] may take to arrive (the body's end: normally in the same
# read) before the connection is given up instead of kept.
DRAIN_SECONDS = 0.5


def read_api_key(card: ModelCard, secret_file: Path | None = None) -> str | None:
    """The card's API key: `secret_file`, else card.api_key_file, else the env var
    card.api_key_env; None when the card needs no key. ModelRequestError when the card names
    a source that is missing (never showing any key)."""
    path = secret_file or card.api_key_file
    if path is not None:
        try:
            key = Path(path).read_text(encoding="utf-8").strip().splitlines()[0].strip()
        except (OSError, IndexError):
            raise ModelRequestError(
                f"model card {card.name}: cannot read an API key from {path}"
            ) from None
        return key
    if card.api_key_env:
        key = os.environ.get(card.api_key_env, "").strip()
        if not key:
            raise ModelRequestError(
                f"model card {card.name}: environment variable {card.api_key_env} is not set"
            )
        return key
    return None


# ---- Msg -> OpenAI chat messages -------------------------------------------------------------


def _data_url(block: DataBlock) -> str:
    if block.url is not None:
        return block.url
    return f"data:{block.mime_type};base64,{base64.b64encode(block.data or b'').decode()}"


def _user_part(block: TextBlock | DataBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if block.media == "image":
        return {"type": "image_url", "image_url": {"url": _data_url(block)}}
    subtype = block.mime_type.split("/", 1)[-1].lower()
    if (
        block.media == "audio"
        and block.data is not None
        and subtype in ("wav", "x-wav", "mpeg", "mp3")
    ):
        fmt = "wav" if "wav" in subtype else "mp3"
        data = base64.b64encode(block.data).decode()
        return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
    if block.data is not None:
        return {
            "type": "file",
            "file": {"file_data": _data_url(block), "filename": block.name or "file"},
        }
    return {"type": "text", "text": f"[{block.mime_type} at {block.url}]"}


def to_openai_messages(messages: Sequence[Msg]) -> list[dict[str, Any]]:
    """The chat-completions messages of `messages`. An assistant Msg becomes assistant
    messages (text + tool_calls) followed by tool messages for its tool results, in block
    order; thinking is not sent back; hints become system messages; assistant media are
    dropped (chat completions cannot carry them)."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        if msg.role == Role.SYSTEM:
            out.append({"role": "system", "content": msg.text})
        elif msg.role == Role.USER:
            blocks = msg.content
            if all(isinstance(b, TextBlock) for b in blocks):
                out.append({"role": "user", "content": msg.text})
            else:
                parts = [_user_part(b) for b in blocks if isinstance(b, TextBlock | DataBlock)]
                out.append({"role": "user", "content": parts})
        else:
            current: dict[str, Any] | None = None
            for block in msg.content:
                if isinstance(block, TextBlock | ToolCallBlock):
                    if current is None:
                        # "" and never null: OpenAI, vLLM, Ollama and DashScope take either
                        # beside tool_calls, llama-cpp-python's server refuses null (its
                        # pydantic schema wants a string: HTTP 500, issue 32).
                        current = {"role": "assistant", "content": ""}
                        out.append(current)
                    if isinstance(block, TextBlock):
                        current["content"] += block.text
                    else:
                        current.setdefault("tool_calls", []).append(
                            {
                                "id": block.id,
                                "type": "function",
                                "function": {
                                    "name": wire_tool_name(block.name),
                                    "arguments": wire_arguments(block),
                                },
                            }
                        )
                elif isinstance(block, ToolResultBlock):
                    out.append({"role": "tool", "tool_call_id": block.id, "content": block.text})
                    current = None
                elif isinstance(block, HintBlock):
                    out.append({"role": "system", "content": block.hint})
                    current = None
                # ThinkingBlock and assistant DataBlock: not sent back
    return out


def wire_arguments(call: ToolCallBlock) -> str:
    """A tool call's arguments as every server takes them back: the model's own text when it
    is a JSON object, "{}" when it is empty, else the text wrapped as a string in an object
    ({"invalid_arguments": "<text>"}). Chat templates that render a call (llama.cpp's jinja
    templates, vLLM's, Ollama's) parse the arguments as a JSON object and refuse the whole
    request when they are not one; wrapped, the model still sees what it wrote, beside the
    tool result that says why the call was refused (ToolCallBlock.arguments owns that rule)."""
    try:
        call.arguments()
    except ToolInputError:
        return json.dumps({"invalid_arguments": call.input}, ensure_ascii=False)
    return call.input if call.input.strip() else "{}"


def wire_tool_name(name: str) -> str:
    """A namespaced tool name (`notes.add_note`, docs/tools.md) as providers accept a
    function name (OpenAI: ^[A-Za-z0-9_-]{1,64}$, no dot): "." becomes "__"; the answer's
    names are mapped back through the offered tools (_StreamState)."""
    return name.replace(".", "__")


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": wire_tool_name(t.name),
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in tools
    ]


# ---- SSE -> ChatResponse -------------------------------------------------------------------------


class _StreamState:
    """What the stream has said so far: tool-call ids by index, finish reason, usage."""

    def __init__(self, tools: Sequence[ToolSpec] = ()) -> None:
        # The offered tools by the name the provider sees (wire_tool_name).
        self.names = {wire_tool_name(t.name): t.name for t in tools}
        self.ids: dict[int, str] = {}
        self.finished_reason = ""
        self.usage: Usage | None = None
        self.done = False

    def chunk(self, event: Mapping[str, Any]) -> ChatResponse | None:
        """The blocks of one chunk; TypeError/AttributeError/ValueError when it is not the
        shape of one (the caller says MODEL_BAD_RESPONSE)."""
        if not isinstance(event, dict):
            raise TypeError("a stream event is not a JSON object")
        if "error" in event:
            raise _StreamError(event["error"])
        if isinstance(event.get("usage"), dict):
            u = event["usage"]
            self.usage = Usage(
                int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
            )
        blocks: list[Any] = []
        for choice in event.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            # A model may send NUL or a lone surrogate (as JSON escapes); no store keeps them.
            if isinstance(reasoning, str) and reasoning:
                blocks.append(ThinkingBlock(storable(reasoning)))
            if isinstance(delta.get("content"), str) and delta["content"]:
                blocks.append(TextBlock(storable(delta["content"])))
            for call in delta.get("tool_calls") or ():
                index = int(call.get("index", 0))
                if call.get("id"):
                    self.ids.setdefault(index, call["id"])
                call_id = self.ids.setdefault(index, f"call_{index}")
                function = call.get("function") or {}
                name, arguments = function.get("name") or "", function.get("arguments") or ""
                name = self.names.get(name, name) if isinstance(name, str) else name
                if isinstance(arguments, str):
                    arguments = storable(arguments)
                blocks.append(ToolCallBlock(id=call_id, name=name, input=arguments))
            if choice.get("finish_reason"):
                reason = choice["finish_reason"]
                self.finished_reason = "tool_calls" if reason == "function_call" else reason
        if not blocks:
            return None
        return ChatResponse(content=tuple(blocks))


async def sse_events(response: httpx.Response) -> AsyncGenerator[ServerSentEvent, None]:
    """The events of `response` the way httpx-sse's EventSource.aiter_sse reads them (lines
    end only at CR or LF, so a model's U+2028 or U+0085 sent unescaped stays inside its
    JSON; an event without data is no event), whatever the Content-Type says (a server that
    streams under another type is read as before), and llama.cpp's `error:` field as an
    event named "error": its server sends the failure of a stream it already started in that
    field, which is not one of the standard's (httpx-sse, as the standard says, drops it)."""
    decoder = SSEDecoder()
    async for line in _aiter_sse_lines(response):
        if line.startswith("error:"):
            decoder.decode("event: error")
            line = "data" + line.removeprefix("error")
        event = decoder.decode(line)
        if event is not None and event.data:
            yield event


async def drain_after_done(events: AsyncIterator[ServerSentEvent], seconds: float) -> None:
    """Read a stream to its end after its [DONE] event, so httpx keeps its connection (it
    reuses one only when the response was read to the end). What a server sends after
    [DONE] is ignored; one that keeps the stream open longer than `seconds` (or breaks it)
    only loses the connection: the answer is complete already."""
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout(seconds):
            async for _ in events:
                pass


# ---- the model ----------------------------------------------------------------------------------


class _StreamError(Exception):
    """An error object the endpoint sent inside a 200 stream."""

    def __init__(self, error: Any) -> None:
        super().__init__("error event")
        self.error = error


class _Retryable(Exception):
    """A failure worth another attempt; `final` is what it becomes when attempts run out."""

    def __init__(
        self,
        reason: str,
        retry_after: float | None = None,
        final: type[ModelUnavailable] = ModelUnavailable,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.final = final


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return min(float(value), RETRY_AFTER_CAP) if value is not None else None
    except ValueError:
        return None


def _error_fields(error: Any) -> tuple[str, str]:
    """(message, code) of an OpenAI-style error object (or whatever came instead): the code
    is its `code`, else its `type` when the code is a number (llama.cpp's and vLLM's `code`
    is the HTTP status, their `type` says what went wrong)."""
    if isinstance(error, dict):
        inner = error.get("error", error)
        if isinstance(inner, dict):
            names = [inner.get("code"), inner.get("type")]
            code = next((n for n in names if isinstance(n, str) and n and not n.isdigit()), "")
            return str(inner.get("message", inner))[:300], code
        return str(inner)[:300], ""
    return str(error)[:300], ""


def _json_or_text(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data


def _error_message(body: bytes) -> tuple[str, str]:
    try:
        return _error_fields(json.loads(body))
    except ValueError:
        return body.decode("utf-8", "replace")[:300], ""


# How endpoints say a request does not fit the context window: OpenAI's and vLLM's code,
# llama-cpp-python's message ("Requested tokens (3790) exceed context window of 2048"),
# llama.cpp server's ("exceeds the available context size"), DashScope's ("Range of input
# length should be [1, 129024]", code invalid_parameter_error), and the common phrasings
# (tests/model/conformance/ holds each provider's documented answer).
_OVERFLOW_CODES = ("context_length_exceeded", "exceed_context_size_error")
_OVERFLOW_PHRASES = (
    "exceed context window",
    "exceeds the available context size",
    "maximum context length",
    "context length exceeded",
    "context window",
    "too many tokens",
    "input is too long",
    "prompt is too long",
    "range of input length",
)


def is_context_overflow(message: str, code: str = "") -> bool:
    text = message.lower()
    return code.lower() in _OVERFLOW_CODES or any(p in text for p in _OVERFLOW_PHRASES)


# How endpoints say a request itself is malformed, whatever status they answer it with:
# pydantic's errors (llama-cpp-python answers its request model's refusal as an HTTP 500:
# "7 validation errors: ... Input should be a valid string"), FastAPI's, and the OpenAI /
# vLLM error types of a bad request.
_INVALID_CODES = ("invalid_request_error", "badrequesterror", "validation_error")
_INVALID_PHRASES = ("validation error", "input should be", "field required")


def is_invalid_request(message: str, code: str = "") -> bool:
    text = message.lower()
    return code.lower() in _INVALID_CODES or any(p in text for p in _INVALID_PHRASES)


def final_refusal(name: str, status: int, message: str, code: str = "") -> ModelError | None:
    """The final error of a non-200 answer; None when another attempt may succeed (429 other
    than an exhausted quota, 408, a 5xx that is not a refusal of the request itself)."""
    if is_context_overflow(message, code):
        # Some servers send it as a 5xx (llama-cpp-python): the same request would fail again.
        return classify_refusal(name, status, message, code)
    if status >= 500 and is_invalid_request(message, code):
        # Only the first line: a validation error's next lines echo the refused input (the
        # prompt's messages), which no error message carries.
        first = message.strip().splitlines()[0] if message.strip() else ""
        return classify_refusal(name, status, first, code)
    if (status == 429 and code != "insufficient_quota") or status in (408, 504) or status >= 500:
        return None
    return classify_refusal(name, status, message, code)


def classify_refusal(name: str, status: int, message: str, code: str = "") -> ModelError:
    """The final error of a refusal that retrying will not change (status 0: one reported
    inside a 200 stream)."""
    detail = f": {message}" if message else ""
    if is_context_overflow(message, code):
        return ModelContextOverflow(
            f"model {name}: the request does not fit its context window{detail}"
        )
    if status in (401, 403) or code in ("invalid_api_key", "authentication_error"):
        return ModelAuthError(
            f"model {name}: the endpoint refused the API key (HTTP {status}){detail}"
        )
    if status == 404 or code == "model_not_found":
        return ModelRequestError(f"model {name}: the endpoint does not know this model{detail}")
    where = f"HTTP {status}" if status else "mid-stream"
    return ModelRequestError(f"model {name}: the endpoint refused the request ({where}){detail}")


class OpenAIChatModel:
    """A model card's OpenAI-compatible endpoint."""

    def __init__(
        self,
        card: ModelCard,
        *,
        api_key: str | None = None,
        backoff_seconds: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if card.provider != "openai" or card.base_url is None:
            raise ValueError(f"model card {card.name} is not an openai card")
        self.card = card
        self.name = card.name
        self.backoff_seconds = backoff_seconds
        self._url = card.base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Accept": "text/event-stream"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = httpx.Timeout(card.timeout_seconds, connect=card.connect_timeout_seconds)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._token_counts: OrderedDict[str, int] = OrderedDict()
        self._tokenizer_warned = False

    def __repr__(self) -> str:  # never the headers: they hold the key
        return f"OpenAIChatModel(card={self.card.name!r}, url={self._url!r})"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout, transport=self._transport)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def request_body(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        options: Mapping[str, Any] | None,
        output_schema: OutputSchema | None = None,
    ) -> dict[str, Any]:
        params = self.card.resolve_parameters(dict(options or {}))
        body: dict[str, Any] = {
            "model": self.card.model,
            "messages": to_openai_messages(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            **params,
        }
        if tools:
            body["tools"] = to_openai_tools(tools)
        if output_schema is not None:
            body["response_format"] = self._response_format(output_schema)
        return body

    def _response_format(self, output: OutputSchema) -> dict[str, Any]:
        """The card's way of asking for one JSON document of `output.schema`."""
        schema = dict(output.schema)
        if self.card.structured_output == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": output.name, "schema": schema, "strict": True},
            }
        if self.card.structured_output == "json_object_schema":
            return {"type": "json_object", "schema": dict(output.grammar_schema or schema)}
        raise ModelRequestError(
            f"model card {self.card.name}: structured_output is none: it cannot be asked for "
            "a JSON document"
        )

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, _Retryable) and error.retry_after is not None:
            return error.retry_after
        return float(self.backoff_seconds * 2 ** (state.attempt_number - 1))

    def _log_retry(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "model %s: %s; retrying (attempt %d of %d)",
            self.name,
            getattr(error, "reason", error),
            state.attempt_number + 1,
            self.card.max_retries + 1,
        )

    async def _open(self, body: dict[str, Any]) -> httpx.Response:
        """The streaming response, once its status is 200; _Retryable on 429/5xx/no connection."""
        request = self._http().build_request("POST", self._url, json=body, headers=self._headers)
        try:
            response = await self._http().send(request, stream=True)
        except httpx.TimeoutException as e:
            raise _Retryable(
                f"{type(e).__name__} talking to {self._url}", final=ModelTimeout
            ) from None
        except httpx.TransportError as e:
            raise _Retryable(f"cannot reach {self._url}: {type(e).__name__}: {e}") from None
        status = response.status_code
        if status == 200:
            return response
        try:
            detail, code = _error_message(await response.aread())
        except httpx.HTTPError:
            detail, code = "", ""
        finally:
            await response.aclose()
        reason = f"HTTP {status} from {self._url}: {detail}".rstrip(": ")
        refusal = final_refusal(self.name, status, detail, code)
        if refusal is not None:
            raise refusal
        if status == 429:
            raise _Retryable(reason, _retry_after(response), final=ModelRateLimited)
        if status in (408, 504):
            raise _Retryable(reason, _retry_after(response), final=ModelTimeout)
        raise _Retryable(reason, _retry_after(response))

    async def _open_with_retries(self, body: dict[str, Any]) -> httpx.Response:
        attempts = self.card.max_retries + 1
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(attempts),
                wait=self._wait,
                retry=retry_if_exception_type(_Retryable),
                before_sleep=self._log_retry,
                reraise=True,
            ):
                with attempt:
                    return await self._open(body)
        except _Retryable as e:
            raise e.final(f"model {self.name}: {e.reason} (after {attempts} attempts)") from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def count_tokens(self, texts: Sequence[str]) -> list[int] | None:
        """Each text's token count by the endpoint's own tokenizer (card.tokenizer); None
        when the card has none, or the endpoint does not answer in TOKENIZE_SECONDS (then
        the caller estimates: a warning is logged once). Counts are kept for the next call."""
        if self.card.tokenizer == "estimate":
            return None
        missing = [t for t in dict.fromkeys(texts) if t not in self._token_counts]
        if missing:
            gate = asyncio.Semaphore(TOKENIZE_CONCURRENCY)

            async def one(text: str) -> int:
                async with gate:
                    return await self._tokenize(text)

            try:
                async with asyncio.timeout(TOKENIZE_SECONDS):
                    counts = await asyncio.gather(*(one(t) for t in missing))
            except (httpx.HTTPError, TimeoutError, ValueError, KeyError, TypeError) as err:
                if not self._tokenizer_warned:
                    self._tokenizer_warned = True
                    log.warning(
                        "model %s: its endpoint did not count tokens (%s); the context budget "
                        "uses the estimate",
                        self.name,
                        type(err).__name__,
                    )
                return None
            for text, count in zip(missing, counts, strict=True):
                self._token_counts[text] = count
            while len(self._token_counts) > TOKEN_CACHE_SIZE:
                self._token_counts.popitem(last=False)
        return [self._token_counts[t] for t in texts]

    async def _tokenize(self, text: str) -> int:
        """One text's token count: llama-cpp-python's POST /extras/tokenize/count ({"input"}
        -> {"count"}) or llama.cpp server's POST /tokenize ({"content"} -> {"tokens"}), at
        the server's root (the base URL less /v1)."""
        root = self._url.removesuffix("/chat/completions").removesuffix("/v1")
        headers = {k: v for k, v in self._headers.items() if k == "Authorization"}
        if self.card.tokenizer == "llama_cpp_python":
            body = {"input": text, "model": self.card.model}
            response = await self._http().post(
                f"{root}/extras/tokenize/count", json=body, headers=headers
            )
            response.raise_for_status()
            return int(response.json()["count"])
        response = await self._http().post(
            f"{root}/tokenize", json={"content": text, "add_special": False}, headers=headers
        )
        response.raise_for_status()
        return len(response.json()["tokens"])

    async def listed_models(self, timeout: float) -> list[str] | None:
        """The model ids the endpoint's GET /models lists; None when it has no list (404, an
        answer that is not one, an empty one). httpx.HTTPError when it cannot be reached,
        TimeoutError when it does not answer within `timeout`, ModelRequestError for any
        other answer (the status only: the body may echo the key)."""
        url = self._url.removesuffix("/chat/completions") + "/models"
        headers = {k: v for k, v in self._headers.items() if k == "Authorization"}
        async with asyncio.timeout(timeout):
            response = await self._http().get(url, headers=headers, timeout=timeout)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise ModelRequestError(f"HTTP {response.status_code} from {url}")
        try:
            data = response.json().get("data")
            ids = [str(m["id"]) for m in data] if isinstance(data, list) else []
        except (ValueError, AttributeError, TypeError, KeyError):
            return None
        return ids or None

    async def _refusal_of(self, body: dict[str, Any]) -> ModelError | None:
        """The endpoint's refusal of `body` asked unstreamed (max_tokens 1); None when it
        does not refuse it (or cannot be asked)."""
        probe = {k: v for k, v in body.items() if k != "stream_options"}
        probe.update(stream=False, max_tokens=1)
        # Twice on a transport error: the dropped stream's connection went back to the pool
        # finished, and llama-cpp-python closes it only when the next request arrives on it
        # ("Server disconnected without sending a response"); the second goes out on a new one.
        for attempt in range(2):
            try:
                response = await self._http().post(self._url, json=probe, headers=self._headers)
                break
            except httpx.TransportError:
                if attempt:
                    return None
            except httpx.HTTPError:
                return None
        if response.status_code == 200:
            return None
        return final_refusal(self.name, response.status_code, *_error_message(response.content))

    async def stream(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec] = (),
        options: Mapping[str, Any] | None = None,
        output_schema: OutputSchema | None = None,
    ) -> AsyncGenerator[ChatResponse, None]:
        body = self.request_body(messages, tools, options, output_schema)
        response = await self._open_with_retries(body)
        state = _StreamState(tools)
        yielded = False
        broken: ModelStreamBroken | None = None
        events = sse_events(response)
        try:
            async for event in events:
                if event.data.strip() == "[DONE]":
                    state.done = True
                    await drain_after_done(events, DRAIN_SECONDS)
                    break
                try:
                    if event.event == "error":
                        raise _StreamError(_json_or_text(event.data))
                    chunk = state.chunk(json.loads(event.data))
                except _StreamError as e:
                    raise classify_refusal(self.name, 0, *_error_fields(e.error)) from None
                except json.JSONDecodeError:
                    # Never the event itself: it may be the model's text.
                    raise ModelBadResponse(
                        f"model {self.name}: a stream event is not JSON"
                    ) from None
                except (TypeError, AttributeError, ValueError) as e:
                    raise ModelBadResponse(
                        f"model {self.name}: a stream event is not a chat-completions chunk ({e})"
                    ) from None
                if chunk is not None:
                    yielded = True
                    yield chunk
        except httpx.TimeoutException:
            raise ModelTimeout(
                f"model {self.name}: no data from {self._url} for {self.card.timeout_seconds}s"
            ) from None
        except httpx.TransportError as e:
            broken = ModelStreamBroken(f"model {self.name}: the stream broke: {type(e).__name__}")
        finally:
            await response.aclose()
        if broken is None and not state.done and not state.finished_reason:
            broken = ModelStreamBroken(
                f"model {self.name}: the stream ended before the response finished"
            )
        if broken is not None:
            if not yielded:
                # Some servers (llama-cpp-python) answer 200 before they look at the request
                # and drop the stream when they refuse it, with no event or only the role's:
                # as nothing reached the caller, ask once more, unstreamed and for one token,
                # to hear the refusal itself (a context overflow is not transient).
                refusal = await self._refusal_of(body)
                if refusal is not None:
                    raise refusal from None
            raise broken from None
        reason = state.finished_reason or "stop"
        yield ChatResponse(is_last=True, finished_reason=reason, usage=state.usage)
