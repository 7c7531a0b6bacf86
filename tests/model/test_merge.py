"""One test per streaming merge rule (shared.model.merge)."""

from __future__ import annotations

import pytest

from shared.messages import (
    DataBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolCallState,
    ToolInputError,
    ToolResultBlock,
    ToolResultState,
    Usage,
)
from shared.model.base import ChatResponse
from shared.model.merge import MessageAccumulator, collect


def merged(*chunks: ChatResponse) -> MessageAccumulator:
    acc = MessageAccumulator(id="m1")
    for chunk in chunks:
        acc.add(chunk)
    return acc


def chunk(*blocks: object, **kw: object) -> ChatResponse:
    # Keyword fields of the test's choosing.
    return ChatResponse(content=blocks, **kw)  # type: ignore[arg-type]


def test_text_deltas_concatenate() -> None:
    acc = merged(chunk(TextBlock("Hel")), chunk(TextBlock("lo")), chunk(TextBlock(" world")))
    assert acc.content() == (TextBlock("Hello world"),)


def test_thinking_deltas_concatenate_apart_from_text() -> None:
    acc = merged(
        chunk(ThinkingBlock("let me ")), chunk(ThinkingBlock("think")), chunk(TextBlock("Answer"))
    )
    assert acc.content() == (ThinkingBlock("let me think"), TextBlock("Answer"))


def test_text_after_another_block_starts_a_new_block() -> None:
    acc = merged(
        chunk(TextBlock("a")),
        chunk(ToolCallBlock(id="c1", name="t", input="{}")),
        chunk(TextBlock("b")),
    )
    assert [type(b) for b in acc.content()] == [TextBlock, ToolCallBlock, TextBlock]


def test_tool_call_input_concatenates_as_a_string_split_mid_json() -> None:
    acc = merged(
        chunk(ToolCallBlock(id="c1", name="search", input='{"qu')),
        chunk(ToolCallBlock(id="c1", name="", input='ery": "gr')),
        chunk(ToolCallBlock(id="c1", name="", input='een tea"}')),
    )
    [call] = acc.content()
    assert call == ToolCallBlock(id="c1", name="search", input='{"query": "green tea"}')
    assert isinstance(call, ToolCallBlock) and call.arguments() == {"query": "green tea"}


def test_interleaved_tool_calls_merge_by_id() -> None:
    acc = merged(
        chunk(ToolCallBlock(id="a", name="one", input="{")),
        chunk(ToolCallBlock(id="b", name="two", input="{")),
        chunk(ToolCallBlock(id="a", name="", input="}")),
        chunk(ToolCallBlock(id="b", name="", input='"x":1}', state=ToolCallState.ALLOWED)),
    )
    assert acc.content() == (
        ToolCallBlock(id="a", name="one", input="{}"),
        ToolCallBlock(id="b", name="two", input='{"x":1}', state=ToolCallState.ALLOWED),
    )


def test_invalid_tool_input_fails_once_parsed_with_a_clear_error() -> None:
    acc = merged(chunk(ToolCallBlock(id="c9", name="search", input='{"q": ')), chunk(is_last=True))
    [call] = acc.message().tool_calls
    with pytest.raises(ToolInputError, match=r"tool call c9 \(search\): input is not valid JSON"):
        call.arguments()


def test_audio_bytes_concatenate() -> None:
    acc = merged(
        chunk(DataBlock("audio/pcm", data=b"\x01\x02")), chunk(DataBlock("audio/pcm", data=b"\x03"))
    )
    assert acc.content() == (DataBlock("audio/pcm", data=b"\x01\x02\x03"),)


def test_image_replaces_the_previous_image() -> None:
    acc = merged(
        chunk(DataBlock("image/png", data=b"low")), chunk(DataBlock("image/png", data=b"high"))
    )
    assert acc.content() == (DataBlock("image/png", data=b"high"),)


def test_video_by_url_replaces() -> None:
    acc = merged(
        chunk(DataBlock("video/mp4", url="https://x/draft.mp4")),
        chunk(DataBlock("video/mp4", url="https://x/final.mp4")),
    )
    assert acc.content() == (DataBlock("video/mp4", url="https://x/final.mp4"),)


def test_audio_mime_mismatch_replaces() -> None:
    acc = merged(
        chunk(DataBlock("audio/wav", data=b"wav")), chunk(DataBlock("audio/mpeg", data=b"mp3"))
    )
    assert acc.content() == (DataBlock("audio/mpeg", data=b"mp3"),)


def test_media_type_mismatch_replaces() -> None:
    acc = merged(
        chunk(DataBlock("audio/wav", data=b"wav")), chunk(DataBlock("image/png", data=b"png"))
    )
    assert acc.content() == (DataBlock("image/png", data=b"png"),)


def test_data_after_text_starts_a_new_block() -> None:
    acc = merged(chunk(TextBlock("here:")), chunk(DataBlock("image/png", data=b"png")))
    assert acc.content() == (TextBlock("here:"), DataBlock("image/png", data=b"png"))


def test_tool_result_with_the_same_id_replaces() -> None:
    acc = merged(
        chunk(ToolResultBlock(id="c1", name="t", output="partial")),
        chunk(ToolResultBlock(id="c1", name="t", output="done", state=ToolResultState.SUCCESS)),
    )
    assert acc.content() == (
        ToolResultBlock(id="c1", name="t", output="done", state=ToolResultState.SUCCESS),
    )


def test_is_last_with_finished_reason_ends_the_response() -> None:
    acc = merged(chunk(TextBlock("hi")))
    assert not acc.done
    acc.add(chunk(is_last=True, finished_reason="stop"))
    assert acc.done and acc.message().finished_reason == "stop"


def test_usage_within_one_call_is_its_last_report() -> None:
    acc = merged(chunk(TextBlock("a"), usage=Usage(10, 1)), chunk(is_last=True, usage=Usage(10, 5)))
    assert acc.message().usage == Usage(10, 5)


def test_usage_of_a_message_is_the_sum_over_its_model_calls() -> None:
    acc = merged(
        chunk(ToolCallBlock(id="c1", name="t", input="{}")),
        chunk(is_last=True, finished_reason="tool_calls", usage=Usage(10, 3)),
        chunk(TextBlock("done")),
        chunk(is_last=True, finished_reason="stop", usage=Usage(20, 4)),
    )
    msg = acc.message()
    assert (msg.usage, msg.finished_reason, acc.calls) == (Usage(30, 7), "stop", 2)


def test_no_usage_reported_leaves_usage_unset() -> None:
    assert merged(chunk(TextBlock("a")), chunk(is_last=True)).message().usage is None


async def test_collect_drains_a_stream_into_a_message() -> None:
    # A stream of the test's own chunks.
    async def stream():  # type: ignore[no-untyped-def]
        yield chunk(TextBlock("a"))
        yield chunk(TextBlock("b"), is_last=True, finished_reason="stop")

    msg = await collect(stream())
    assert (msg.text, msg.finished_reason) == ("ab", "stop")


def test_merge_is_not_quadratic_in_the_stream_size() -> None:
    """A bound, not a benchmark (bench/merge.py has the numbers): 4x the chunks must not
    cost anywhere near 16x. CPU time with the GC off, so machine load does not flake it."""
    import gc
    import time

    piece = ChatResponse(content=(ToolCallBlock(id="c", name="", input="x"),))

    def run(size: int) -> float:
        acc = MessageAccumulator()
        gc.disable()
        try:
            start = time.process_time()
            for _ in range(size):
                acc.add(piece)
            acc.content()
            return time.process_time() - start
        finally:
            gc.enable()

    run(10_000)  # warm up
    small, large = min(run(50_000) for _ in range(3)), min(run(200_000) for _ in range(3))
    assert large / small < 8, f"4x the input took {large / small:.1f}x the time"
