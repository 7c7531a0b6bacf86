"""Memory consolidation (issue 31), without I/O: which of an owner's memories say one fact
twice (duplicates: merged into one) and which a later memory contradicts (superseded: the
older is removed), so the store stays small and current. Every merge and supersession is a
change record (actions `merge` and `supersede`, core.Change).

Two memories are duplicates when they are about the same person (core's subject rule: the
user, or the relation named after "User's" / "用户的"), have the same polarity (core.negated)
and either
  - the same words (`words`: the stemmed words without stop words and without the user
    named at the start, and Chinese bigrams, as a search asks for them: "User is allergic
    to penicillin", "The user is allergic to penicillin." and "I am allergic to
    penicillin"; "用户对青霉素过敏" and "我对青霉素过敏"), or
  - their embeddings by the configured model have a cosine of at least DUPLICATE_COSINE
    and they share DUPLICATE_WORD_SHARE of their words (only in the ConsolidateMemories
    pass, which reads stored vectors: a write never waits for the model).
A duplicate group keeps its oldest memory (its id is the one the owner and runs have seen
longest), which takes the others' source messages.

A memory supersedes an older one about the same person when
  - it says the opposite of it: the same words once the negation is taken out ("User does
    not eat pork" / "User eats pork"; "用户对海鲜不过敏" / "用户对海鲜过敏"), or
  - both give one value of a single-valued attribute (`attribute`: where the user lives,
    their name, age, employer, job, a favourite thing), each value a name rather than a
    description (`_simple`), and the values differ ("User lives in Hangzhou" supersedes
    "User lives in Shanghai"; "User lives in a house with a garden" supersedes nothing).
    Attributes that may hold many values (likes, allergies, possessions) never supersede
    each other, nor do dates (a birthday "in autumn" and "on 9 July" are both true).

Never merged or superseded: memories about different people, memories of opposite polarity
that say different things.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from services.memory import core
from services.memory.core import Memory

# Duplicates by meaning need both: vectors at least DUPLICATE_COSINE alike and at least
# DUPLICATE_WORD_SHARE of their words shared (of the union). Vectors alone cannot tell:
# on issue 31's labelled set (python -m bench.memory_consolidation) the local model
# (multilingual-e5-small) puts a fact and its near synonym up to 0.992 apart ("User writes
# a newsletter about urban cycling" / "User subscribes to a newsletter about urban
# cycling"), its first-person rewording 0.938-0.99; and one word turns a fact into another
# ("User is a night-shift security guard" / "User hired a night-shift security guard":
# 0.978, 0.8 of the words; filler "用户昨天在二手网站上卖了一台缝纫机" / "用户春天..." 0.983,
# 0.87). So vectors only confirm a near-identical wording; rewordings are merged by the
# words rule (which takes the user named at the start off).
DUPLICATE_COSINE = 0.98
DUPLICATE_WORD_SHARE = 0.9
# A write answers with the memories of the same person sharing at least this share of its
# words (neither merged nor superseded): the agent may decide to update or forget them.
SIMILAR_SHARE = 0.6
MAX_SIMILAR = 5

# Negations taken out to compare two memories' statements (core.negated reads them).
_NEGATION_EN = re.compile(r"\b(?:not|never|no|n't|cannot)\b|n't\b")
# 没 alone: "没有X" is the opposite of "有X".
_NEGATION_ZH = re.compile(r"不|没")
_ATTRIBUTES_EN = [
    (name, re.compile(pattern))
    for name, pattern in (
        ("lives_in", r"^(?:the )?(?:user|i) (?:lives|live|is living|now lives) in (.+)$"),
        ("name", r"^(?:the )?(?:user's|my) name is (.+)$"),
        ("name", r"^(?:the )?(?:user|i) (?:is|am) called (.+)$"),
        ("age", r"^(?:the )?(?:user|i) (?:is|am) (\d+)(?: years old)?$"),
        ("employer", r"^(?:the )?(?:user|i) (?:works|work|is working) (?:at|for) (.+)$"),
        ("job", r"^(?:the )?(?:user|i) (?:works|work) as (?:an? )?(.+)$"),
        ("favourite", r"^(?:the )?(?:user's|my) favou?rite (\w+(?: \w+)?) is (.+)$"),
    )
]
_ATTRIBUTES_ZH = [
    (name, re.compile(pattern))
    for name, pattern in (
        ("lives_in", r"^(?:用户|我)(?:现在)?住在(.+)$"),
        ("name", r"^(?:用户|我)(?:的名字)?叫(.+)$"),
        ("name", r"^(?:用户|我)的名字是(.+)$"),
        ("age", r"^(?:用户|我)(?:今年)?(\d+)岁$"),
        ("favourite", r"^(?:用户|我)最喜欢的(.+?)是(.+)$"),
    )
]
# A value two memories can be told apart by: a name ("Hangzhou", "New York", "杭州"), not
# a description that may hold beside another value ("a house with a garden" and "Rotterdam";
# "中央公园附近" and "鹿特丹"): English at most three words, none a stop word; Chinese at
# most four characters, no 的 and no locative ending (附近, 旁边...).
_MAX_VALUE_WORDS = 3
_MAX_VALUE_CHARS_ZH = 4
_LOCATIVE_ZH = ("附近", "旁边", "边", "里", "上", "下", "内", "外", "地方")


def _simple(value: str, chinese: bool) -> bool:
    if chinese:
        short = len(value) <= _MAX_VALUE_CHARS_ZH and "的" not in value
        return short and not value.endswith(_LOCATIVE_ZH)
    words = value.split()
    return len(words) <= _MAX_VALUE_WORDS and not any(w in core.STOP_WORDS for w in words)


@dataclass(frozen=True)
class Statement:
    """What the rules read of a memory."""

    content: str
    subject: frozenset[str]
    negated: bool
    words: frozenset[str]
    # `words` with the negation taken out.
    claim: frozenset[str]
    # (attribute, value) of a single-valued attribute, else None.
    attribute: tuple[str, str] | None


# The user named at the start, in the words the memory agent and the user write ("User",
# "The user's", "My", "I", "用户的", "我"): taken off before the words are compared, so
# "I am allergic to penicillin" and "User is allergic to penicillin" have the same words
# (the subject rule still tells the user from "User's wife").
_USER_LEAD = re.compile(r"^(?:(?:the )?user(?:'s)?|my|i'm|i)\b\s*|^(?:用户|我)的?")


def words(text: str) -> frozenset[str]:
    """The words two memories are compared by: stemmed, without stop words and without the
    user named at the start; Chinese as bigrams."""
    key = core.content_key(text).replace("\u2019", "'")
    return frozenset(core.query_tokens(_USER_LEAD.sub("", key)) or core.query_tokens(key))


@dataclass(frozen=True)
class Said:
    """A memory and what it states."""

    memory: Memory
    statement: Statement


def said(memory: Memory) -> Said:
    return Said(memory, statement(memory.content))


def statement(content: str) -> Statement:
    key = core.content_key(content).replace("\u2019", "'")
    without = _NEGATION_ZH.sub("", _NEGATION_EN.sub(" ", key))
    return Statement(
        content=content,
        subject=frozenset(core.subject(content)),
        negated=core.negated(content),
        words=words(content),
        claim=words(without),
        attribute=attribute(key),
    )


def attribute(key: str) -> tuple[str, str] | None:
    """The single-valued attribute a content key states, and its value."""
    # Named with the language: values in two languages cannot be compared by their words.
    language, patterns = ("zh", _ATTRIBUTES_ZH) if core.is_cjk(key[:2]) else ("en", _ATTRIBUTES_EN)
    for name, pattern in patterns:
        found = pattern.match(key)
        if found:
            *qualifier, value = found.groups()
            value = value.strip()
            if not _simple(value, language == "zh"):
                return None
            return (":".join([language, name, *qualifier]), value)
    return None


# A write asks the full-text index for the memories sharing SIMILAR_SHARE of its words
# only when it has at most this many (the combinations grow fast: 8 words are 56 groups,
# which made a write 3x slower at 2,000 memories).
_MAX_SIMILAR_WORDS = 6


def candidate_groups(content: str) -> list[tuple[str, ...]]:
    """What a write asks the full-text index for (each group: a memory holding all of its
    tokens): the memories that can be its duplicate (all its words), its opposite (all the
    words of its claim), another value of its attribute (the words before the value) or
    similar to it (SIMILAR_SHARE of its words, for a short one). Not found this way, and
    left to ConsolidateMemories: a Chinese negated memory that a positive write
    contradicts (its bigrams around 不 are not the write's)."""
    said = statement(content)
    groups = {tuple(sorted(said.words)), tuple(sorted(said.claim))}
    if said.attribute is not None:
        key = core.content_key(content).replace("\u2019", "'")
        groups.add(tuple(sorted(words(key[: key.rfind(said.attribute[1])]))))
    if len(said.words) <= _MAX_SIMILAR_WORDS:
        need = math.ceil(len(said.words) * SIMILAR_SHARE)
        groups |= set(itertools.combinations(sorted(said.words), need))
    return sorted(g for g in groups if g)


def duplicates(a: Statement, b: Statement, cosine: float | None = None) -> bool:
    """Whether `a` and `b` say one fact (the module doc's rule)."""
    if a.subject != b.subject or a.negated != b.negated:
        return False
    if a.words == b.words:
        return True
    if cosine is None or cosine < DUPLICATE_COSINE:
        return False
    return len(a.words & b.words) / len(a.words | b.words) >= DUPLICATE_WORD_SHARE


def supersedes(newer: Statement, older: Statement) -> bool:
    """Whether `newer` contradicts `older` (the module doc's rule)."""
    if newer.subject != older.subject:
        return False
    if newer.negated != older.negated:
        return newer.claim == older.claim
    if newer.negated or newer.attribute is None or older.attribute is None:
        return False
    return newer.attribute[0] == older.attribute[0] and newer.attribute[1] != older.attribute[1]


def similar(new: Statement, old: Statement) -> bool:
    """Whether `old` shares SIMILAR_SHARE of `new`'s words, about the same person."""
    if new.subject != old.subject or not new.words:
        return False
    return len(new.words & old.words) / len(new.words) >= SIMILAR_SHARE


def _newer(a: Memory, b: Memory) -> bool:
    return (a.update_time, a.create_time, a.id) > (b.update_time, b.create_time, b.id)


@dataclass(frozen=True)
class Plan:
    """What a consolidation pass does: each kept memory with the duplicates merged into
    it, and each newer memory with the older ones it supersedes."""

    merges: list[tuple[Memory, list[Memory]]] = field(default_factory=list)
    supersessions: list[tuple[Memory, list[Memory]]] = field(default_factory=list)

    @property
    def removed(self) -> list[Memory]:
        return [m for _, gone in [*self.merges, *self.supersessions] for m in gone]


# id -> {id: cosine} of the pairs of memories whose vectors are near (both directions).
Neighbours = Mapping[str, Mapping[str, float]]


def plan(memories: Sequence[Memory], neighbours: Neighbours | None = None) -> Plan:
    """The owner's consolidation: duplicates merged (oldest kept), then contradicted
    memories superseded (newest wins). `neighbours`: the pairs whose vectors have a cosine
    of at least DUPLICATE_COSINE (the others are not duplicates by meaning)."""
    neighbours = neighbours or {}
    kept: dict[str, Said] = {}  # oldest first
    groups: dict[str, list[Memory]] = {}
    by_words: dict[tuple[frozenset[str], bool, frozenset[str]], Said] = {}
    for memory in sorted(memories, key=lambda m: (m.create_time, m.id)):
        this = said(memory)
        s = this.statement
        into = by_words.get((s.subject, s.negated, s.words))
        if into is None:
            # Near by meaning to a kept memory, the oldest first (compared with the kept
            # ones only, so a chain of near pairs never merges its two ends).
            near = neighbours.get(memory.id, {})
            candidates = sorted(
                (kept[i] for i in near if i in kept),
                key=lambda k: (k.memory.create_time, k.memory.id),
            )
            into = next(
                (k for k in candidates if duplicates(s, k.statement, near[k.memory.id])), None
            )
        if into is not None:
            groups[into.memory.id].append(memory)
            continue
        kept[memory.id] = this
        groups[memory.id] = []
        by_words[(s.subject, s.negated, s.words)] = this
    merges = [(k.memory, groups[i]) for i, k in kept.items() if groups[i]]
    return Plan(merges=merges, supersessions=supersession_plan(list(kept.values())))


def supersession_plan(memories: Sequence[Said]) -> list[tuple[Memory, list[Memory]]]:
    """Each memory that supersedes others, newest first, with them; a superseded memory
    supersedes nothing itself."""
    newest_first = sorted(memories, key=lambda s: _sort_key(s.memory), reverse=True)
    gone: set[str] = set()
    out: list[tuple[Memory, list[Memory]]] = []
    for i, newer in enumerate(newest_first):
        if newer.memory.id in gone:
            continue
        older = [
            s.memory
            for s in newest_first[i + 1 :]
            if s.memory.id not in gone and supersedes(newer.statement, s.statement)
        ]
        gone.update(m.id for m in older)
        if older:
            out.append((newer.memory, older))
    return out


def _sort_key(m: Memory) -> tuple[object, ...]:
    return (m.update_time, m.create_time, m.id)


@dataclass(frozen=True)
class WriteOutcome:
    """What a new fact does to the owner's memories (WriteMemory)."""

    merged_into: Memory | None = None
    superseded: list[Memory] = field(default_factory=list)
    similar: list[Memory] = field(default_factory=list)


def on_write(content: str, others: Sequence[Memory]) -> WriteOutcome:
    """A new fact (not one of `others`' content keys) against the owner's memories that
    share its words (what the lexical index finds): the oldest it duplicates takes it;
    else it supersedes the ones it contradicts, and the similar ones are named."""
    new = statement(content)
    candidates = [said(m) for m in others]
    same = [c.memory for c in candidates if duplicates(new, c.statement)]
    if same:
        return WriteOutcome(merged_into=min(same, key=lambda m: (m.create_time, m.id)))
    superseded = [c.memory for c in candidates if supersedes(new, c.statement)]
    gone = {m.id for m in superseded}
    alike = [c.memory for c in candidates if c.memory.id not in gone and similar(new, c.statement)]
    return WriteOutcome(superseded=superseded, similar=alike[:MAX_SIMILAR])


def plan_changes(plan: Plan, actor: str) -> list[core.Change]:
    """The change records of a consolidation pass: its merges, then its supersessions."""
    records = [merge_change(kept, m, actor) for kept, merged in plan.merges for m in merged]
    for newer, older in plan.supersessions:
        records += [supersede_change(newer, m, actor) for m in older]
    return records


def write_merge_change(kept: Memory, fact: core.MemoryWrite, actor: str) -> core.Change:
    """The record of a write merged into `kept`, the memory of the same fact (the write's
    words as previous_content, its sources)."""
    return core.Change(
        action="merge",
        memory_id=kept.id,
        content=kept.content,
        kind=kept.kind,
        previous_content=fact.content,
        actor=actor,
        source_run_id=fact.source_run_id or "",
        source_message_ids=fact.source_message_ids,
        reason="a write of the same fact in other words",
    )


def merge_change(kept: Memory, merged: Memory, actor: str) -> core.Change:
    """The record of a duplicate merged into `kept` (the duplicate's id and words)."""
    return core.Change(
        action="merge",
        memory_id=merged.id,
        content=kept.content,
        kind=kept.kind,
        previous_content=merged.content,
        actor=actor,
        source_run_id=merged.source_run_id,
        source_message_ids=merged.source_message_ids,
        reason=f"the same fact as memory {kept.id}",
    )


def supersede_change(newer: Memory, older: Memory, actor: str) -> core.Change:
    """The record of `older` superseded by `newer` (older's words as they were)."""
    return core.Change(
        action="supersede",
        memory_id=older.id,
        content=newer.content,
        kind=older.kind,
        previous_content=older.content,
        actor=actor,
        source_run_id=newer.source_run_id,
        source_message_ids=newer.source_message_ids,
        reason=f"contradicted by memory {newer.id}",
    )
