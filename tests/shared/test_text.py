"""shared.text: the one rule for text a store must keep (no NUL, no lone surrogate)."""

from __future__ import annotations

import pytest

from shared.errors import InvalidArgument
from shared.model.openai import _StreamState
from shared.text import check_storable, is_storable, storable


@pytest.mark.parametrize("text", ["a\x00b", "\x00", "a\ud800b", "\udfff"])
def test_nul_and_lone_surrogates_are_not_storable(text: str) -> None:
    assert not is_storable(text)
    with pytest.raises(InvalidArgument) as err:
        check_storable(text, "messages[0].content")
    assert [f for f, _ in err.value.violations] == ["messages[0].content"]


@pytest.mark.parametrize("text", ["", "plain", "我喜欢绿茶", "emoji \U0001f375", "tab\tnew\nline"])
def test_ordinary_text_is_storable_and_kept_as_is(text: str) -> None:
    assert is_storable(text)
    assert check_storable(text, "f") == text
    assert storable(text) == text


def test_model_output_is_made_storable_instead_of_refused() -> None:
    assert storable("a\x00b\ud800c") == "a\ufffdb\ufffdc"
    assert is_storable(storable("\x00\udc00"))


def test_a_nul_a_model_streams_reaches_the_reply_as_a_replacement_character() -> None:
    state = _StreamState()
    chunk = state.chunk({"choices": [{"index": 0, "delta": {"content": "tea\x00time\ud800"}}]})
    assert chunk is not None
    assert chunk.content[0].text == "tea\ufffdtime\ufffd"
