"""The memory service's rules, without I/O: what a memory is, when two writes are one fact,
which memories a forget or search query matches, and how the watermark is named.

Matching rule (ForgetMemory by content_query, and the substring side of SearchMemories):
  - text is normalised by `content_key` (NFKC, casefold, whitespace collapsed, trailing
    punctuation stripped);
  - `terms(text)` are its runs of letters/digits (Unicode words), in order, deduplicated;
  - a term is CJK when it contains a Han, kana or Hangul character: written Chinese and
    Japanese have no spaces, so a CJK term is one long run ("我喜欢绿茶") and can only be
    found inside another as a substring;
  - a memory matches a query when their content keys are equal, or when the query has at
    least one term and every query term is contained in the memory: a CJK term as a
    substring of the memory's content key, any other term as a whole word of the memory.
  So "green tea" matches "I love green tea" (but "tea" does not match "steam"), and "绿茶"
  matches "我喜欢绿茶".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from shared import pagination
from shared.errors import InvalidArgument
from shared.ids import check_identifier, id_problem, optional_identifier
from shared.text import check_storable

MAX_CONTENT_CHARS = 2000
MAX_QUERY_CHARS = 2000
MAX_SOURCE_MESSAGE_IDS = 100
# A memory rewritten by many runs keeps its most recent sources only.
KEPT_SOURCE_MESSAGE_IDS = 100
MAX_POSITION_CHARS = 1024

DEFAULT_KIND = "fact"
KINDS = frozenset({"fact", "preference", "dislike", "name", "place"})

DEFAULT_WATERMARK = "memory_agent"
_WATERMARK_NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")

_SPACE_RE = re.compile(r"\s+")
_TERM_RE = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Memory:
    id: str
    owner_id: str
    content: str
    content_key: str
    kind: str
    source_run_id: str
    source_message_ids: tuple[str, ...]
    create_time: datetime
    update_time: datetime
    version: int
    # A search result's relevance (0..1, higher is better); 0 outside search.
    score: float = 0.0


@dataclass(frozen=True)
class MemoryWrite:
    """A validated WriteMemory request. `kind` is None when the caller named none (a new
    memory gets DEFAULT_KIND, a rewrite keeps its kind); `source_run_id` likewise."""

    content: str
    content_key: str
    kind: str | None
    source_run_id: str | None
    source_message_ids: tuple[str, ...]


@dataclass(frozen=True)
class Watermark:
    name: str
    position: str
    time: datetime | None
    update_time: datetime | None


def content_key(text: str) -> str:
    """The identity of a fact: "I love green tea." and "i love  green tea" share one key."""
    key = _SPACE_RE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    end = len(key)
    while end and (unicodedata.category(key[end - 1]).startswith("P") or key[end - 1] == " "):
        end -= 1
    return key[:end]


def terms(text: str) -> tuple[str, ...]:
    """The words of `text` after normalisation, in order, without repeats."""
    return tuple(dict.fromkeys(_TERM_RE.findall(content_key(text))))


def is_cjk(term: str) -> bool:
    return any(_is_cjk_char(c) for c in term)


def _is_cjk_char(c: str) -> bool:
    code = ord(c)
    return (
        0x3040 <= code <= 0x30FF  # hiragana, katakana
        or 0x3400 <= code <= 0x4DBF  # CJK extension A
        or 0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0xAC00 <= code <= 0xD7AF  # hangul syllables
        or 0xF900 <= code <= 0xFAFF  # CJK compatibility ideographs
        or 0x20000 <= code <= 0x3134F  # CJK extensions B-G
    )


def term_in(term: str, key: str, words: frozenset[str]) -> bool:
    """Whether one query term is contained in a memory (its content key and words)."""
    return term in key if is_cjk(term) else term in words


def matches(query: str, content: str) -> bool:
    """Whether `content` matches the forget/search `query` (the rule in the module doc)."""
    query_key, key = content_key(query), content_key(content)
    if query_key and query_key == key:
        return True
    query_terms = terms(query)
    if not query_terms:
        return False
    words = frozenset(terms(content))
    return all(term_in(t, key, words) for t in query_terms)


def validate_write(
    content: str, kind: str, source_run_id: str, source_message_ids: Sequence[str]
) -> MemoryWrite:
    text = check_storable(content, "content").strip()
    if not text:
        raise InvalidArgument("content", "must not be empty")
    if len(text) > MAX_CONTENT_CHARS:
        raise InvalidArgument("content", f"must be at most {MAX_CONTENT_CHARS} characters")
    key = content_key(text)
    if not key:
        raise InvalidArgument("content", "must contain more than punctuation")
    if kind and kind not in KINDS:
        raise InvalidArgument("kind", f"must be one of {', '.join(sorted(KINDS))}")
    optional_identifier(source_run_id, "source_run_id")
    if len(source_message_ids) > MAX_SOURCE_MESSAGE_IDS:
        raise InvalidArgument(
            "source_message_ids", f"must hold at most {MAX_SOURCE_MESSAGE_IDS} ids"
        )
    for message_id in source_message_ids:
        problem = id_problem(message_id)
        if problem is not None:
            raise InvalidArgument("source_message_ids", f"each id {problem}")
    return MemoryWrite(
        content=text,
        content_key=key,
        kind=kind or None,
        source_run_id=source_run_id or None,
        source_message_ids=tuple(dict.fromkeys(source_message_ids)),
    )


def merge_sources(old: Iterable[str], new: Iterable[str]) -> tuple[str, ...]:
    """Old sources then new ones, without repeats, the most recent KEPT_SOURCE_MESSAGE_IDS."""
    merged = tuple(dict.fromkeys([*old, *new]))
    return merged[-KEPT_SOURCE_MESSAGE_IDS:]


def validate_query(field: str, query: str) -> str:
    text = check_storable(query, field).strip()
    if not text:
        raise InvalidArgument(field, "must not be empty")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidArgument(field, f"must be at most {MAX_QUERY_CHARS} characters")
    if not content_key(text):
        raise InvalidArgument(field, "must contain more than punctuation")
    return text


def validate_id(field: str, value: str) -> str:
    return check_identifier(value, field)


def watermark_name(name: str) -> str:
    if not name:
        return DEFAULT_WATERMARK
    if not _WATERMARK_NAME_RE.match(name):
        raise InvalidArgument(
            "name",
            "must be 1 to 63 lowercase letters, digits, '_', '.' or '-', starting with a letter",
        )
    return name


def validate_position(field: str, position: str, *, required: bool) -> str:
    if required and not position:
        raise InvalidArgument(field, "must not be empty")
    if len(position) > MAX_POSITION_CHARS:
        raise InvalidArgument(field, f"must be at most {MAX_POSITION_CHARS} characters")
    return position


def coverage(query: str, content: str) -> float:
    """The share of the query's terms contained in `content` (0..1; the matching rule)."""
    query_terms = terms(query)
    if not query_terms:
        return 0.0
    key = content_key(content)
    words = frozenset(terms(content))
    return sum(term_in(t, key, words) for t in query_terms) / len(query_terms)


def rank_search_hits(
    fts_hits: Sequence[tuple[Memory, float]], substring_hits: Sequence[Memory], limit: int
) -> list[Memory]:
    """Full-text hits by score (best first), then substring-only hits, newest update first;
    each memory once."""
    seen: set[str] = set()
    ranked: list[Memory] = []
    by_score = sorted(fts_hits, key=lambda h: (-h[1], -h[0].update_time.timestamp(), h[0].id))
    by_time = sorted(substring_hits, key=lambda m: (-m.update_time.timestamp(), m.id))
    for memory in [m for m, _ in by_score] + by_time:
        if memory.id not in seen:
            seen.add(memory.id)
            ranked.append(memory)
    return ranked[:limit]


def page_position(memory: Memory) -> list[str]:
    """The keyset of ListMemories' order (update_time desc, id desc) after `memory`."""
    return [memory.update_time.isoformat(), memory.id]


def parse_page_position(position: object) -> tuple[datetime, str]:
    time, memory_id = pagination.position_list(position, 2)
    when, memory_id = pagination.position_time(time), pagination.position_str(memory_id)
    return when, memory_id
