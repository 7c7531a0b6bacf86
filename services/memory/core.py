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

Search (SearchMemories) is ranked retrieval, not that rule:
  - lexical: a memory is indexed by `search_tokens(content)`: every non-CJK word stemmed
    (Snowball English: "likes", "liked" -> "like"), every CJK run as its characters and its
    overlapping character bigrams ("我喜欢绿茶" -> 我 喜 欢 绿 茶 我喜 喜欢 欢绿 绿茶). A query
    is `query_tokens(query)`: its stemmed words without English stop words, its CJK runs
    as bigrams (one character alone as itself) without bigrams of two function characters
    ("什么", "我的"). A memory with any query token is a hit, ranked by the database's
    full-text rank (PostgreSQL ts_rank, SQLite FTS5 bm25).
    Why bigrams and not a segmenter (jieba): a segmenter splits the same word differently
    by context and by dictionary ("绿茶" inside "喜欢绿茶叶" may not come out as a word), so
    a query word can miss a memory that contains it; bigrams find every Chinese word of two
    or more characters inside unsegmented text with no dictionary to ship or keep current,
    index and query the same way on both databases, and rank documents sharing more of
    the query's bigrams higher. The cost is a larger index and a few accidental bigram
    hits across word boundaries, which the ranking and the vector half push down.
  - vectors, when an embedding model is configured: nearest memories by cosine similarity;
  - `fuse`: reciprocal rank fusion of the lists that ran, each lexical hit weighted by its
    share of the query tokens (with vectors, only hits with at least half of them), then
    the structured hints: a memory about another person than the query names, or negated
    where the query is not, is demoted (`hint_weight`, `polarity_weight`; measured by
    bench/memory_quality.py, docs/benchmarks/memory-quality.md).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

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

MAX_REASON_CHARS = 500
# Who changes a memory: a run (its agent's tools), or the owner through the memory API.
ACTORS = ("run", "api")

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
class MemoryEdit:
    """A validated UpdateMemory request; None: unchanged."""

    id: str
    content: str | None
    content_key: str | None
    kind: str | None
    expected_version: int


@dataclass(frozen=True)
class Change:
    """One record of what happened to a memory (ListMemoryChanges)."""

    action: str  # write | rewrite | update | forget | merge | supersede
    memory_id: str
    content: str
    kind: str
    previous_content: str
    actor: str  # run | api
    source_run_id: str
    source_message_ids: tuple[str, ...]
    reason: str
    create_time: datetime | None = None


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


# The code points of CJK scripts (one owner: the tokenizer's runs, the vector half's
# per-script centering, and its PostgreSQL pattern, CJK_PATTERN).
CJK_RANGES = (
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0x20000, 0x3134F),  # CJK extensions B-G
)
# A regular expression (PostgreSQL's and Python's) matching a text holding any of them.
CJK_PATTERN = "[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]"


def _is_cjk_char(c: str) -> bool:
    code = ord(c)
    return any(a <= code <= b for a, b in CJK_RANGES)


# English words a question is made of that say nothing of what is asked about.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only
    or other our ours ourselves out over own same she should so some such than that the
    their theirs them themselves then there these they this those through to too under
    until up very was we were what when where which while who whom why will with would
    you your yours yourself yourselves ever tell know remember s t d ll m re ve""".split()
)
# Chinese function characters: a query bigram of two of them ("什么", "我的") is dropped.
_CJK_STOP_CHARS = frozenset("我你他她它们的了吗呢吧啊呀是在有么什哪谁几个这那都也和与就还又要会")


@functools.cache
def _stem() -> Callable[[str], str]:
    """The English stemmer's stemWord. Imported at the first memory written or searched:
    snowballstemmer's package loads the stemmers of its 30-odd languages (~3 MB of RSS) that
    an idle process, or one whose agents never use memory, would hold for nothing (issue 24).
    """
    import snowballstemmer

    # Cached: a search stems every word of each hit it weighs (token_coverage), most of
    # them words seen before; uncached, stemming was a third of a hybrid search's own time
    # at 2,000 memories (issue 31).
    stem: Callable[[str], str] = functools.lru_cache(maxsize=1 << 16)(
        snowballstemmer.stemmer("english").stemWord
    )
    return stem


def _runs(text: str) -> list[tuple[str, bool]]:
    """The terms of `text` split into maximal CJK and non-CJK runs: (run, is_cjk)."""
    runs: list[tuple[str, bool]] = []
    for term in _TERM_RE.findall(content_key(text)):
        start = 0
        for i in range(1, len(term) + 1):
            if i == len(term) or _is_cjk_char(term[i]) != _is_cjk_char(term[start]):
                runs.append((term[start:i], _is_cjk_char(term[start])))
                start = i
    return runs


def _bigrams(run: str) -> list[str]:
    return [run[i : i + 2] for i in range(len(run) - 1)]


def search_tokens(text: str) -> list[str]:
    """The lexical index tokens of a memory (the rule in the module doc), in order."""
    tokens: list[str] = []
    stem = _stem()
    for run, cjk in _runs(text):
        if cjk:
            tokens.extend(run)
            tokens.extend(_bigrams(run))
        else:
            tokens.append(stem(run))
    return tokens


def search_text(text: str) -> str:
    """`search_tokens` as the space-separated text the full-text indexes read."""
    return " ".join(search_tokens(text))


def query_tokens(query: str) -> tuple[str, ...]:
    """The lexical tokens a query looks for (the rule in the module doc), without repeats.
    Stop words and function bigrams are left out unless nothing else is left."""
    tokens: list[str] = []
    stop: list[str] = []
    stem = _stem()
    for run, cjk in _runs(query):
        if not cjk:
            (stop if run in STOP_WORDS else tokens).append(stem(run))
        elif len(run) == 1:
            (stop if run in _CJK_STOP_CHARS else tokens).append(run)
        else:
            for bigram in _bigrams(run):
                is_stop = bigram[0] in _CJK_STOP_CHARS and bigram[1] in _CJK_STOP_CHARS
                (stop if is_stop else tokens).append(bigram)
    return tuple(dict.fromkeys(tokens or stop))


# enough_of lists the token combinations up to this many query tokens; a longer query
# asks for any of its tokens (the share is then checked on the hits).
_MAX_COMBINED_TOKENS = 8


def any_of(tokens: Sequence[str]) -> list[tuple[str, ...]]:
    """The lexical query "any of the tokens": one group per token."""
    return [(t,) for t in tokens]


def enough_of(tokens: Sequence[str]) -> list[tuple[str, ...]]:
    """The lexical query "at least MIN_FUSED_COVERAGE of the tokens": each combination of
    that many tokens is a group, all of whose tokens a hit holds."""
    if len(tokens) > _MAX_COMBINED_TOKENS:
        return any_of(tokens)
    need = max(1, math.ceil(len(tokens) * MIN_FUSED_COVERAGE))
    return list(itertools.combinations(tokens, need))


def token_coverage(query: Sequence[str], content: str) -> float:
    """The share of the query tokens found among the memory's search tokens (0..1)."""
    if not query:
        return 0.0
    present = frozenset(search_tokens(content))
    return sum(t in present for t in query) / len(query)


# Reciprocal rank fusion's constant: a hit at rank r of a list adds weight / (RRF_K + r).
RRF_K = 60
# With vectors, a lexical hit takes part only when it has at least this share of the
# query's tokens: one shared common word ("favourite", "喜欢") is weaker evidence than the
# nearest meaning, and let in it pushed the right memory down (bench/memory_search.py).
MIN_FUSED_COVERAGE = 0.5


class Ranked(Protocol):
    """What fusion ranks: a memory, or a chat message of the conversation index."""

    @property
    def id(self) -> str: ...

    @property
    def update_time(self) -> datetime: ...


_R = TypeVar("_R", bound=Ranked)


def fuse(
    rankings: Sequence[Sequence[tuple[Memory, float]]], limit: int, query: str = ""
) -> list[Memory]:
    """`fused` memories, each with its score set."""
    ranked = fused(rankings, limit, query, lambda m: m.content)
    return [dataclasses.replace(m, score=score) for m, score in ranked]


def fused(
    rankings: Sequence[Sequence[tuple[_R, float]]],
    limit: int,
    query: str = "",
    text: Callable[[_R], str] | None = None,
) -> list[tuple[_R, float]]:
    """Weighted reciprocal rank fusion of best-first rankings (each a list that ran, possibly
    empty), each hit with its weight in 0..1 (lexical: its token coverage; vector: 1); ties
    by newest update, then id. With the `query` and each hit's `text`, each hit's fused value
    is then weighed by its structured hints (`hint_weight`, `polarity_weight`: HINT_DEMOTION
    for a text about a person the query does not name, and for a negated one the query does
    not negate). Each result's score is its value over the best possible one (first with
    weight 1 in every ranking): 1 is "first everywhere", and a hit that one of two rankings
    found scores at most 0.5."""
    if not rankings:
        return []
    scores: dict[str, float] = {}
    first: dict[str, _R] = {}
    for ranking in rankings:
        for rank, (hit, weight) in enumerate(ranking, start=1):
            scores[hit.id] = scores.get(hit.id, 0.0) + weight / (RRF_K + rank)
            first.setdefault(hit.id, hit)
    if query and text is not None:
        for hit in first.values():
            said = text(hit)
            scores[hit.id] *= hint_weight(query, said) * polarity_weight(query, said)
    best = len(rankings) / (RRF_K + 1)
    ordered = sorted(
        first.values(), key=lambda h: (-scores[h.id], -h.update_time.timestamp(), h.id)
    )
    return [(h, min(1.0, scores[h.id] / best)) for h in ordered[:limit]]


def lexical_groups(tokens: Sequence[str], *, with_vectors: bool) -> list[tuple[str, ...]]:
    """What the full-text index is asked for: any token alone; with vectors, enough of them
    (only those hits take part, see MIN_FUSED_COVERAGE)."""
    return enough_of(tokens) if with_vectors else any_of(tokens)


def rankings(
    tokens: Sequence[str],
    lexical: Sequence[_R],
    nearest: Sequence[_R] | None,
    text: Callable[[_R], str],
) -> list[list[tuple[_R, float]]]:
    """The lists a search fuses: the lexical hits weighted by their token coverage (with
    vectors, only those with MIN_FUSED_COVERAGE of the tokens), and the nearest by meaning
    (weight 1) when vectors ran (`nearest` None: they did not)."""
    weighted = [(h, token_coverage(tokens, text(h))) for h in lexical]
    if nearest is None:
        return [weighted]
    weighted = [(h, c) for h, c in weighted if c >= MIN_FUSED_COVERAGE]
    return [weighted, [(h, 1.0) for h in nearest]]


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


def _content(content: str) -> tuple[str, str]:
    """A memory's text, stripped, and its content key; INVALID_ARGUMENT naming `content`."""
    text = check_storable(content, "content").strip()
    if not text:
        raise InvalidArgument("content", "must not be empty")
    if len(text) > MAX_CONTENT_CHARS:
        raise InvalidArgument("content", f"must be at most {MAX_CONTENT_CHARS} characters")
    key = content_key(text)
    if not key:
        raise InvalidArgument("content", "must contain more than punctuation")
    return text, key


def _kind(kind: str) -> None:
    if kind and kind not in KINDS:
        raise InvalidArgument("kind", f"must be one of {', '.join(sorted(KINDS))}")


def validate_sources(source_run_id: str, source_message_ids: Sequence[str]) -> tuple[str, ...]:
    optional_identifier(source_run_id, "source_run_id")
    if len(source_message_ids) > MAX_SOURCE_MESSAGE_IDS:
        raise InvalidArgument(
            "source_message_ids", f"must hold at most {MAX_SOURCE_MESSAGE_IDS} ids"
        )
    for message_id in source_message_ids:
        problem = id_problem(message_id)
        if problem is not None:
            raise InvalidArgument("source_message_ids", f"each id {problem}")
    return tuple(dict.fromkeys(source_message_ids))


def validate_write(
    content: str, kind: str, source_run_id: str, source_message_ids: Sequence[str]
) -> MemoryWrite:
    text, key = _content(content)
    _kind(kind)
    validate_sources(source_run_id, source_message_ids)
    return MemoryWrite(
        content=text,
        content_key=key,
        kind=kind or None,
        source_run_id=source_run_id or None,
        source_message_ids=tuple(dict.fromkeys(source_message_ids)),
    )


def validate_edit(memory_id: str, content: str, kind: str, expected_version: int) -> MemoryEdit:
    check_identifier(memory_id, "id")
    text, key = _content(content) if content else (None, None)
    _kind(kind)
    if not content and not kind:
        raise InvalidArgument("content", "set content or kind (or both)")
    if expected_version < 0:
        raise InvalidArgument("expected_version", "must not be negative")
    return MemoryEdit(memory_id, text, key, kind or None, expected_version)


def validate_actor(actor: str) -> str:
    """Empty: a run. Else one of ACTORS."""
    if not actor:
        return "run"
    if actor not in ACTORS:
        raise InvalidArgument("actor", f"must be empty or one of {', '.join(ACTORS)}")
    return actor


def validate_reason(reason: str) -> str:
    text = check_storable(reason, "reason").strip()
    if len(text) > MAX_REASON_CHARS:
        raise InvalidArgument("reason", f"must be at most {MAX_REASON_CHARS} characters")
    return text


def write_change(memory: Memory, created: bool, fact: MemoryWrite, actor: str) -> Change:
    """The record of a write: a new memory, or a rewrite of the same fact."""
    return Change(
        action="write" if created else "rewrite",
        memory_id=memory.id,
        content=memory.content,
        kind=memory.kind,
        previous_content="",
        actor=actor,
        source_run_id=fact.source_run_id or "",
        source_message_ids=fact.source_message_ids,
        reason="",
    )


def update_change(before: Memory, after: Memory, actor: str) -> Change:
    return Change(
        action="update",
        memory_id=after.id,
        content=after.content,
        kind=after.kind,
        previous_content=before.content if before.content != after.content else "",
        actor=actor,
        source_run_id="",
        source_message_ids=(),
        reason="",
    )


def forget_changes(
    forgotten: Sequence[Memory],
    actor: str,
    reason: str,
    source_run_id: str,
    source_message_ids: Sequence[str],
) -> list[Change]:
    """The records of a forget: each memory it removed, as it was, and why."""
    return [
        Change(
            action="forget",
            memory_id=m.id,
            content=m.content,
            kind=m.kind,
            previous_content="",
            actor=actor,
            source_run_id=source_run_id,
            source_message_ids=tuple(source_message_ids),
            reason=reason,
        )
        for m in forgotten
    ]


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


def page_position(memory: Memory) -> list[str]:
    """The keyset of ListMemories' order (update_time desc, id desc) after `memory`."""
    return [memory.update_time.isoformat(), memory.id]


def parse_page_position(position: object) -> tuple[datetime, str]:
    time, memory_id = pagination.position_list(position, 2)
    when, memory_id = pagination.position_time(time), pagination.position_str(memory_id)
    return when, memory_id


# Structured hints (issue 31): a memory about someone else of the user's circle, or one
# that says the opposite, reads much like the fact a question asks for (the vectors of
# "User's wife is allergic to shellfish" and "User is allergic to shellfish" are nearly
# one). By rule: the person a memory is about (the relation right after "User's" /
# "用户的", or "My" / "我的" in the user's own words) and whether it is negated, against
# the people the query names and its own polarity. A memory about a person the query does
# not name is demoted, and so is a negated one when the query is not negated.
# Each class: its English words (whole words) and Chinese ones (substrings); a query that
# names a class in `_COVERS` names its members too ("my kids" covers son and daughter).
_PEOPLE: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    name: (frozenset(en.split()), tuple(zh.split()))
    for name, en, zh in (
        ("spouse", "wife husband spouse partner girlfriend boyfriend ex",
         "妻子 丈夫 老伴 老婆 老公 爱人 对象 另一半 太太 女朋友 男朋友 前妻 前夫"),
        ("mother", "mother mum mom mama", "母亲 妈"),
        ("father", "father dad daddy stepfather", "父亲 爸 继父"),
        ("parents", "parents", "父母 爸妈"),
        ("brother", "brother brothers", "哥哥 弟弟 兄弟 哥 弟"),
        ("sister", "sister sisters twin", "姐姐 妹妹 姐 妹"),
        ("sibling", "sibling siblings", "兄弟姐妹 手足"),
        ("son", "son boy", "儿子 男孩"),
        ("daughter", "daughter girl", "女儿 闺女"),
        ("child", "child children kid kids baby infant", "孩子 小孩 宝宝 婴儿"),
        ("grandparent", "grandmother grandma granny grandfather grandad grandparents",
         "奶奶 外婆 爷爷 外公 姥姥 祖父母"),
        ("grandchild", "grandchild grandchildren grandkids granddaughter grandson",
         "孙辈 孙女 孙子 外孙"),
        ("relative", "niece nephew cousin uncle aunt relative", "侄女 外甥 表哥 表弟 表姐 表妹 "
         "叔叔 舅舅 姑姑 姨妈 亲戚"),
        ("in_law", "law", "婆婆 岳父 岳母 公公"),
        ("friend", "friend mate roommate", "朋友 哥们 闺蜜 室友"),
        ("colleague", "colleague coworker", "同事"),
        ("neighbour", "neighbour neighbor", "邻居"),
        ("boss", "boss manager mentor", "上司 领导 老板 导师"),
    )
}  # fmt: skip
_COVERS = {
    "parents": {"mother", "father", "in_law"},
    "mother": {"parents"},
    "father": {"parents"},
    "sibling": {"brother", "sister"},
    "brother": {"sibling"},
    "sister": {"sibling"},
    "child": {"son", "daughter"},
    "son": {"child"},
    "daughter": {"child"},
    "spouse": {"in_law"},
    "relative": {"in_law"},
}
_NEGATION_WORDS = frozenset("not never no cannot nothing nobody t".split())
# 无, 未, 别 are left out: mostly inside words that negate nothing (无线, 未来, 别人).
_NEGATION_ZH = ("不", "没")
# A-not-A and fixed words that hold 不/没 but do not negate ("吃不吃", "没错").
_NOT_NEGATION_ZH = re.compile(r"(.)[不没]\1|不错|没错|不管|要不|差不多|不久|不同|不断")
HINT_DEMOTION = 0.5


def _people(text: str, *, lead_only: bool) -> set[str]:
    """The person classes `text` names; `lead_only`: only the one a memory is about, the
    person named first after "User's" / "The user's" / "My" / "用户(的)" / "我(的)" ("User's
    friend's wife": friend)."""
    key = content_key(text).replace("\u2019", "'")
    if not lead_only:
        words = frozenset(_TERM_RE.findall(key))
        named = {n for n, (en, zh) in _PEOPLE.items() if words & en or any(w in key for w in zh)}
        for name in list(named):
            named |= _COVERS.get(name, set())
        return named
    prefixes = ("user's ", "the user's ", "my ")
    lead = next((key[len(p) :] for p in prefixes if key.startswith(p)), None)
    if lead is not None:
        for word in lead.replace("'s", " ").split()[:2]:
            for name, (en, _) in _PEOPLE.items():
                if word in en:
                    return {name}
        return set()
    if key.startswith(("用户", "我")):
        lead = key.removeprefix("用户").removeprefix("我").removeprefix("的")
        found = [(len(w), n) for n, (_, zh) in _PEOPLE.items() for w in zh if lead.startswith(w)]
        return {max(found)[1]} if found else set()
    return set()


def subject(text: str) -> set[str]:
    """Who a memory is about: the person class named first after "User's" / "My" / "用户的"
    / "我的" (empty: the user, or no one the rule knows)."""
    return _people(text, lead_only=True)


def negated(text: str) -> bool:
    """Whether `text` says something is not so (by its words: not, never, 不, 没...)."""
    key = content_key(text)
    if frozenset(_TERM_RE.findall(key)) & _NEGATION_WORDS:
        return True
    return any(n in _NOT_NEGATION_ZH.sub("", key) for n in _NEGATION_ZH)


def hint_weight(query: str, content: str) -> float:
    """1, or HINT_DEMOTION for a memory about a person the query does not name."""
    about = _people(content, lead_only=True)
    if about and not about & _people(query, lead_only=False):
        return HINT_DEMOTION
    return 1.0


def polarity_weight(query: str, content: str) -> float:
    """1, or HINT_DEMOTION for a negated memory when the query is not negated."""
    return HINT_DEMOTION if negated(content) and not negated(query) else 1.0
