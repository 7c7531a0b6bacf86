"""Each way a model call fails has its own error (and RUN_ERROR code); only the transient
ones are retried, and no key or prompt text reaches a log or a message."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from services.launcher import free_port
from shared.messages import user
from shared.model.base import (
    ModelAuthError,
    ModelBadResponse,
    ModelContextOverflow,
    ModelError,
    ModelRateLimited,
    ModelRequestError,
    ModelStreamBroken,
    ModelTimeout,
    ModelUnavailable,
)
from shared.model.merge import collect
from shared.model.openai import classify_refusal
from tests.model.fake_openai import Reply, error, events, fake_openai, recording
from tests.model.test_openai import SECRET, model

PROMPT = "my secret diary entry about the merger"
TEXT = {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}


async def fails(replies: list[Reply], **card: object) -> tuple[ModelError, int]:
    """The error one call raises, and how many requests the endpoint saw."""
    async with fake_openai(replies) as fake:
        m = model(fake.base_url, **card)
        with pytest.raises(ModelError) as err:
            await collect(m.stream([user(PROMPT)]))
        await m.aclose()
    return err.value, len(fake.requests)


async def test_llama_cpp_context_overflow_is_its_own_error_and_not_retried() -> None:
    # llama-cpp-python answers a prompt larger than its n_ctx like this (a 400 or a 500).
    for status in (400, 500):
        err, requests = await fails(
            [
                error(status, "Requested tokens (3790) exceed context window of 2048"),
                recording("text.sse"),
            ]
        )
        assert isinstance(err, ModelContextOverflow) and err.reason == "MODEL_CONTEXT_OVERFLOW"
        assert "3790" in err.message and "try again" not in err.message
        assert requests == 1


async def test_openai_context_length_exceeded_code_is_an_overflow() -> None:
    err, _ = await fails(
        [
            error(
                400,
                "This model's maximum context length is 8192 tokens.",
                code="context_length_exceeded",
            )
        ]
    )
    assert err.reason == "MODEL_CONTEXT_OVERFLOW"


async def test_wrong_api_key_is_authentication_and_not_retried() -> None:
    err, requests = await fails([error(401, "Incorrect API key provided", code="invalid_api_key")])
    assert isinstance(err, ModelAuthError) and err.reason == "MODEL_AUTHENTICATION"
    assert requests == 1


async def test_unknown_model_is_an_invalid_request() -> None:
    err, requests = await fails(
        [error(404, "The model `nope` does not exist", code="model_not_found")]
    )
    assert type(err) is ModelRequestError and err.reason == "MODEL_INVALID_REQUEST"
    assert "does not know this model" in err.message and requests == 1


async def test_bad_parameter_is_an_invalid_request() -> None:
    err, requests = await fails(
        [error(400, "temperature: must be <= 2", type="invalid_request_error")]
    )
    assert err.reason == "MODEL_INVALID_REQUEST" and requests == 1


async def test_rate_limit_past_the_retries_is_rate_limited_and_transient() -> None:
    err, requests = await fails([error(429, "slow down")] * 3, max_retries=2)
    assert isinstance(err, ModelRateLimited) and isinstance(err, ModelUnavailable)
    assert err.reason == "MODEL_RATE_LIMITED" and requests == 3


async def test_exhausted_quota_is_not_retried() -> None:
    err, requests = await fails([error(429, "You exceeded your quota", code="insufficient_quota")])
    assert not isinstance(err, ModelUnavailable) and requests == 1


async def test_server_errors_past_the_retries_are_unavailable() -> None:
    err, requests = await fails([error(503, "loading")] * 3, max_retries=2)
    assert type(err) is ModelUnavailable and err.reason == "MODEL_UNAVAILABLE" and requests == 3


async def test_a_server_that_is_down_is_unavailable() -> None:
    m = model(f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
    with pytest.raises(ModelUnavailable) as err:
        await collect(m.stream([user(PROMPT)]))
    await m.aclose()
    assert err.value.reason == "MODEL_UNAVAILABLE"


async def test_a_silent_server_is_a_timeout() -> None:
    err, _ = await fails([Reply(stall=30)], timeout_seconds=0.2, max_retries=0)
    assert isinstance(err, ModelTimeout) and err.reason == "MODEL_TIMEOUT"


async def test_a_chunk_that_is_not_json_is_a_bad_response_without_its_text() -> None:
    err, requests = await fails([events(TEXT, "{not json " + PROMPT)])
    assert isinstance(err, ModelBadResponse) and err.reason == "MODEL_BAD_RESPONSE"
    assert PROMPT not in err.message and requests == 1


async def test_a_chunk_of_the_wrong_shape_is_a_bad_response() -> None:
    for payload in ([1, 2], {"choices": "nope"}, {"choices": [{"index": 0, "delta": "x"}]}):
        err, _ = await fails([events(payload)])
        assert err.reason == "MODEL_BAD_RESPONSE", payload


async def test_a_stream_closed_mid_way_is_broken_and_transient() -> None:
    err, requests = await fails([events(TEXT, done=False)])
    assert isinstance(err, ModelStreamBroken) and isinstance(err, ModelUnavailable)
    assert err.reason == "MODEL_STREAM_BROKEN" and requests == 1
    body = recording("text.sse").body
    err, _ = await fails([Reply(body=body, cut_after=len(body) // 2)])
    assert err.reason == "MODEL_STREAM_BROKEN"


async def test_an_error_inside_a_200_stream_is_classified_like_a_refusal() -> None:
    overflow = {"error": {"message": "Requested tokens (3000) exceed context window of 2048"}}
    err, _ = await fails([events(TEXT, overflow, done=False)])
    assert err.reason == "MODEL_CONTEXT_OVERFLOW"
    err, _ = await fails(
        [events({"error": {"message": "tool_choice required failed", "code": 500}})]
    )
    assert err.reason == "MODEL_INVALID_REQUEST" and "mid-stream" in err.message


async def test_no_key_or_prompt_text_in_logs_or_messages(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    replies = [error(500, "upstream"), error(429, "slow"), error(400, "bad request")]
    err, _ = await fails(replies, max_retries=2)
    assert "retrying" in caplog.text
    for text in (caplog.text, err.message, repr(err)):
        assert SECRET not in text and PROMPT not in text


def test_only_the_transient_kinds_are_unavailable_at_the_grpc_edge() -> None:
    transient = (ModelUnavailable, ModelTimeout, ModelRateLimited, ModelStreamBroken)
    final = (ModelRequestError, ModelAuthError, ModelContextOverflow, ModelBadResponse)
    assert all(cls("x").code.name == "UNAVAILABLE" for cls in transient)
    assert all(cls("x").code.name == "FAILED_PRECONDITION" for cls in final)
    reasons = {cls("x").reason for cls in transient + final}
    assert len(reasons) == 8 and all(r.startswith("MODEL_") for r in reasons)
    assert classify_refusal("m", 403, "forbidden").reason == "MODEL_AUTHENTICATION"


async def test_a_stream_dropped_before_any_event_is_asked_again_unstreamed_for_its_refusal() -> (
    None
):
    # llama-cpp-python answers 200 at once and drops the stream when the prompt is too long.
    overflow = error(
        400, "This model's maximum context length is 2048 tokens.", code="context_length_exceeded"
    )
    async with fake_openai([events(done=False), overflow]) as fake:
        m = model(fake.base_url)
        with pytest.raises(ModelContextOverflow):
            await collect(m.stream([user(PROMPT)]))
        await m.aclose()
    first, probe = fake.requests
    assert first.body["stream"] is True
    assert (
        probe.body["stream"] is False
        and probe.body["max_tokens"] == 1
        and "stream_options" not in probe.body
    )


async def test_a_dropped_stream_whose_request_is_fine_stays_broken() -> None:
    err, requests = await fails([events(done=False), recording("text.sse")])
    assert err.reason == "MODEL_STREAM_BROKEN" and requests == 2
    # Once something streamed, nothing is asked again.
    err, requests = await fails([events(TEXT, done=False), recording("text.sse")])
    assert err.reason == "MODEL_STREAM_BROKEN" and requests == 1


# llama-cpp-python 0.3.36's answer to an assistant message with "content": null: its
# request model's pydantic errors as an HTTP 500, each echoing the input it refused.
VALIDATION_500 = (
    "2 validation errors:\n"
    "  {'type': 'string_type', 'loc': ('body', 'messages', 1, "
    "'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid "
    f"string', 'input': None}}\n  {{'type': 'missing', 'msg': 'Field required', 'input': "
    f"{{'role': 'user', 'content': '{PROMPT}'}}}}"
)


async def test_a_500_whose_body_is_a_validation_error_is_final_and_not_retried() -> None:
    err, requests = await fails(
        [error(500, VALIDATION_500, type="internal_server_error"), recording("text.sse")]
    )
    assert type(err) is ModelRequestError and err.reason == "MODEL_INVALID_REQUEST"
    assert "HTTP 500" in err.message and "2 validation errors" in err.message
    assert "try again" not in err.message and PROMPT not in err.message
    assert requests == 1


async def test_a_500_without_a_validation_body_stays_transient() -> None:
    err, requests = await fails([error(500, "CUDA out of memory")] * 2, max_retries=1)
    assert type(err) is ModelUnavailable and requests == 2


async def test_a_dropped_stream_whose_connection_the_server_then_closes_hears_the_refusal() -> None:
    # llama-cpp-python 0.3.36 answers a prompt past its n_ctx with 200, an empty chunked body,
    # and closes the kept connection when the next request arrives on it.
    overflow = error(
        400, "This model's maximum context length is 2048 tokens.", code="context_length_exceeded"
    )
    async with fake_openai(
        [replace(events(done=False), drop_next=True), overflow], keep_alive=True
    ) as fake:
        m = model(fake.base_url)
        with pytest.raises(ModelContextOverflow):
            await collect(m.stream([user(PROMPT)]))
        await m.aclose()
    assert [r.body["stream"] for r in fake.requests] == [True, False]


async def test_a_stream_that_said_only_its_role_before_dropping_is_asked_again() -> None:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    overflow = error(
        400, "This model's maximum context length is 2048 tokens.", code="context_length_exceeded"
    )
    err, requests = await fails([events(role, done=False), overflow])
    assert err.reason == "MODEL_CONTEXT_OVERFLOW" and requests == 2


async def test_llama_cpp_servers_error_field_inside_a_stream_is_classified() -> None:
    # llama.cpp's server sends a failure of a started stream as an SSE `error:` field.
    body = (
        b'error: {"code": 400, "message": "the request exceeds the available context size, '
        b'try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 3216, '
        b'"n_ctx": 2048}\n\n'
    )
    err, requests = await fails([Reply(body=body, headers={"Content-Type": "text/event-stream"})])
    assert err.reason == "MODEL_CONTEXT_OVERFLOW" and requests == 1
