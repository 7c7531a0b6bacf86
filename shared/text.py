"""The one rule for text a store must keep: no NUL and no lone surrogates.

PostgreSQL's text and JSONB refuse U+0000 (SQLite would keep it, so the two backends would
disagree), and a lone surrogate (JSON's "\\ud800" escape) cannot be encoded as UTF-8. Input
with either is refused where it enters, naming its field; text a model produced is made
storable instead (a model's output is not the caller's mistake).
"""

from __future__ import annotations

import re

from shared.errors import InvalidArgument

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
TEXT_RULE = "must not contain NUL characters or lone surrogates (\\u0000, \\ud800-\\udfff)"


def is_storable(text: str) -> bool:
    return _UNSTORABLE.search(text) is None


def check_storable(text: str, field: str) -> str:
    """`text`, or INVALID_ARGUMENT naming `field` when a store could not keep it."""
    if not is_storable(text):
        raise InvalidArgument(field, TEXT_RULE)
    return text


def storable(text: str) -> str:
    """`text` with each NUL or lone surrogate replaced by U+FFFD (for model output)."""
    return text if is_storable(text) else _UNSTORABLE.sub("\ufffd", text)
