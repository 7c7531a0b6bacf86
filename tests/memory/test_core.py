"""The memory rules without a server: normalisation, matching, validation, ranking."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from services.memory import core
from shared.errors import InvalidArgument

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _memory(memory_id: str, minutes: int) -> core.Memory:
    return core.Memory(
        id=memory_id,
        owner_id="o",
        content=memory_id,
        content_key=memory_id,
        kind="fact",
        source_run_id="",
        source_message_ids=(),
        create_time=T0,
        update_time=T0 + timedelta(minutes=minutes),
        version=1,
    )


def test_content_key_casefolds_collapses_whitespace_and_strips_trailing_punctuation() -> None:
    assert core.content_key("I love green tea.") == core.content_key("i love  green tea")
    assert core.content_key("  I LOVE\tgreen tea!!! ") == "i love green tea"


def test_content_key_strips_full_width_trailing_punctuation() -> None:
    assert core.content_key("我喜欢绿茶。") == core.content_key("我喜欢绿茶") == "我喜欢绿茶"
    assert core.content_key("我喜欢绿茶！") == "我喜欢绿茶"


def test_content_key_keeps_inner_punctuation() -> None:
    assert core.content_key("Lin, from Hangzhou.") == "lin, from hangzhou"


def test_terms_are_words_and_cjk_runs_without_repeats() -> None:
    assert core.terms("I love green tea, green TEA!") == ("i", "love", "green", "tea")
    assert core.terms("我喜欢绿茶，也喜欢咖啡") == ("我喜欢绿茶", "也喜欢咖啡")


def test_is_cjk() -> None:
    assert core.is_cjk("绿茶")
    assert core.is_cjk("おちゃ")
    assert not core.is_cjk("tea")


def test_query_words_all_contained_match() -> None:
    assert core.matches("green tea", "I love green tea")
    assert core.matches("Tea green", "I love green tea.")


def test_query_with_a_word_the_memory_lacks_does_not_match() -> None:
    assert not core.matches("green tea", "I love black tea")


def test_non_cjk_terms_match_whole_words_only() -> None:
    assert not core.matches("tea", "I like steam trains")


def test_chinese_query_matches_as_substring() -> None:
    assert core.matches("绿茶", "我喜欢绿茶")
    assert not core.matches("红茶", "我喜欢绿茶")


def test_mixed_query_needs_the_words_and_the_chinese_substring() -> None:
    assert core.matches("Lin 绿茶", "Lin 喜欢绿茶")
    assert not core.matches("Lin 绿茶", "Wang 喜欢绿茶")


def test_equal_keys_match() -> None:
    assert core.matches("I LOVE GREEN TEA!", "i love green tea")


def test_query_without_words_matches_nothing() -> None:
    assert not core.matches("...", "I love green tea")


def test_write_defaults_leave_kind_and_run_to_the_existing_memory() -> None:
    fact = core.validate_write("  I love green tea. ", "", "", ["m1", "m1", "m2"])
    assert fact.content == "I love green tea."
    assert fact.content_key == "i love green tea"
    assert fact.kind is None and fact.source_run_id is None
    assert fact.source_message_ids == ("m1", "m2")


@pytest.mark.parametrize(
    ("content", "kind", "field"),
    [
        ("", "", "content"),
        ("   ", "", "content"),
        ("x" * 2001, "", "content"),
        ("?!.", "", "content"),
        ("I love tea", "hobby", "kind"),
    ],
)
def test_bad_write_names_the_field(content: str, kind: str, field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        core.validate_write(content, kind, "", [])
    assert info.value.violations[0][0] == field


def test_content_of_exactly_2000_characters_is_accepted() -> None:
    assert core.validate_write("x" * 2000, "", "", []).content == "x" * 2000


def test_empty_source_message_id_is_rejected() -> None:
    with pytest.raises(InvalidArgument) as info:
        core.validate_write("I love tea", "", "", [""])
    assert info.value.violations[0][0] == "source_message_ids"


def test_merge_sources_keeps_order_without_repeats_and_is_bounded() -> None:
    assert core.merge_sources(["a", "b"], ["b", "c"]) == ("a", "b", "c")
    many = core.merge_sources([str(i) for i in range(100)], ["new"])
    assert len(many) == core.KEPT_SOURCE_MESSAGE_IDS
    assert many[-1] == "new" and "0" not in many


def test_watermark_name_defaults_to_memory_agent() -> None:
    assert core.watermark_name("") == "memory_agent"
    assert core.watermark_name("summary_agent") == "summary_agent"


@pytest.mark.parametrize("name", ["Memory", "1agent", "a b", "x" * 64])
def test_bad_watermark_name_is_rejected(name: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        core.watermark_name(name)
    assert info.value.violations[0][0] == "name"


def _ranked(*memories: core.Memory, weight: float = 1.0) -> list[tuple[core.Memory, float]]:
    return [(m, weight) for m in memories]


def test_fusion_ranks_by_reciprocal_rank_over_every_ranking() -> None:
    a, b, c, d = _memory("a", 1), _memory("b", 2), _memory("c", 3), _memory("d", 4)
    # b: 2nd and 1st; a: 1st and 3rd; c: 2nd of one list only; d: 3rd of one list only.
    fused = core.fuse([_ranked(a, b, d), _ranked(b, c, a)], limit=10)
    assert [m.id for m in fused] == ["b", "a", "c", "d"]
    scores = [m.score for m in fused]
    assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)
    # First in every ranking is 1; found by one of two rankings is at most 0.5.
    assert core.fuse([_ranked(a), _ranked(a)], limit=1)[0].score == 1.0
    assert core.fuse([_ranked(a), _ranked(b)], limit=2)[0].score <= 0.5
    assert len(core.fuse([_ranked(a, b, d), _ranked(b, c, a)], limit=3)) == 3
    assert core.fuse([[], []], limit=5) == []


def test_fusion_weighs_each_hit() -> None:
    a, b = _memory("a", 1), _memory("b", 2)
    # a is first lexically but with a quarter of the query's tokens; b is second with all.
    fused = core.fuse([[(a, 0.25), (b, 1.0)]], limit=2)
    assert [m.id for m in fused] == ["b", "a"]
    assert fused[1].score < 0.3


def test_equal_fused_ranks_fall_back_to_newest_update() -> None:
    a, b = _memory("a", 1), _memory("b", 2)
    assert [m.id for m in core.fuse([_ranked(a), _ranked(b)], limit=2)] == ["b", "a"]


def _said(content: str, minutes: int) -> core.Memory:
    return dataclasses.replace(_memory(content, minutes), content=content)


# Structured hints: each pair is (the user's own fact, a memory that reads much like it).
# The look-alike is ranked first by the rankings (newer, and first in the list), as the
# vectors of the two are nearly one.
@pytest.mark.parametrize(
    ("query", "fact", "look_alike"),
    [
        ("Can I eat crab cakes?", "User is allergic to shellfish",
         "User's wife is allergic to shellfish"),
        ("螃蟹我能吃吗？", "用户对海鲜过敏", "用户的老伴对海鲜过敏"),
        ("Can I eat crab cakes?", "I am allergic to shellfish", "My wife is allergic to shellfish"),
        ("When is my wife turning a year older?", "User's wife Laura was born on 14 March",
         "User's friend's wife Sophie was born on 2 May"),
        ("我老婆哪天过生日？", "用户的妻子劳拉生日是三月十四日", "用户朋友的妻子生日是五月二日"),
        ("What is my favourite drink?", "User's favourite drink is jasmine green tea",
         "User does not drink black coffee"),
        ("我吃不吃肉？", "用户吃素", "用户不吃猪肉"),
    ],
)  # fmt: skip
def test_a_look_alike_about_someone_else_or_negated_ranks_below_the_fact(
    query: str, fact: str, look_alike: str
) -> None:
    mine, other = _said(fact, 1), _said(look_alike, 2)
    fused = core.fuse([_ranked(other, mine), _ranked(other, mine)], limit=2, query=query)
    assert [m.content for m in fused] == [fact, look_alike]
    # Without the query (no hints), the rankings alone decide.
    assert core.fuse([_ranked(other, mine)], limit=2)[0].content == look_alike


@pytest.mark.parametrize(
    ("query", "memory"),
    [
        ("Can my wife eat prawns?", "User's wife is allergic to shellfish"),
        ("我老婆能吃虾吗？", "用户的妻子对贝类海鲜过敏"),
        ("What food must I keep from my boy?", "用户的儿子利奥对鸡蛋过敏"),
        ("Where are my mother and father?", "用户的父母住在成都"),
        ("Do my kids go to school?", "User's daughter Mia started school in September"),
        ("Is there a meat I do not eat?", "User does not eat pork"),
    ],
)
def test_a_memory_about_the_person_or_negation_the_query_names_keeps_its_rank(
    query: str, memory: str
) -> None:
    named, plain = _said(memory, 2), _said("User likes green tea", 1)
    fused = core.fuse([_ranked(named, plain)], limit=2, query=query)
    assert fused[0].content == memory
    assert core.hint_weight(query, memory) == core.polarity_weight(query, memory) == 1.0


def test_the_user_as_subject_is_not_another_person() -> None:
    # Relations later in the sentence say what the user has, not whom the memory is about.
    for memory in ("用户有个弟弟叫萨姆，住在多伦多", "User has two children, Mia and Leo"):
        assert core.hint_weight("Do I have any siblings?", memory) == 1.0
    # A question in the A-not-A form asks, it does not negate.
    assert not core.negated("我吃不吃肉？") and core.negated("用户对阿司匹林不过敏")


def test_search_tokens_split_chinese_into_characters_and_bigrams() -> None:
    assert core.search_tokens("我喜欢绿茶") == [
        *"我喜欢绿茶",
        "我喜",
        "喜欢",
        "欢绿",
        "绿茶",
    ]
    # Latin words are stemmed; a script change splits a run ("Lin喜欢").
    assert core.search_tokens("Lin喜欢 drinking teas") == [
        *("lin", "喜", "欢", "喜欢", "drink", "tea")
    ]


def test_query_tokens_drop_stop_words_unless_nothing_else_is_left() -> None:
    assert core.query_tokens("What do I like to drink?") == ("like", "drink")
    assert core.query_tokens("我喜欢什么？") == ("我喜", "喜欢", "欢什")
    assert core.query_tokens("茶") == ("茶",)
    assert core.query_tokens("who are you") == ("who", "are", "you")
    assert core.query_tokens("$") == ()


def test_a_chinese_word_inside_unsegmented_text_is_among_its_tokens() -> None:
    pairs = [("绿茶", "我每天早上都喝一杯绿茶"), ("上海", "我住在上海浦东"), ("猫", "家里养两只猫")]
    for word, text in pairs:
        assert set(core.query_tokens(word)) <= set(core.search_tokens(text))
        assert core.token_coverage(core.query_tokens(word), text) == 1.0
    assert core.token_coverage(core.query_tokens("咖啡"), "我喜欢绿茶") == 0.0


def test_page_position_round_trips_and_garbage_is_a_bad_token() -> None:
    memory = _memory("a", 5)
    assert core.parse_page_position(core.page_position(memory)) == (memory.update_time, "a")
    for bad in (None, "x", ["not a time", "a"], ["2026-01-01T00:00:00", "a"], [1, 2, 3]):
        with pytest.raises(InvalidArgument) as info:
            core.parse_page_position(bad)
        assert info.value.violations[0][0] == "page_token"


def test_enough_of_asks_for_half_of_the_tokens_in_every_combination() -> None:
    assert core.enough_of(("a", "b", "c")) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert core.enough_of(("a",)) == [("a",)]
    assert core.any_of(("a", "b")) == [("a",), ("b",)]
    many = tuple("abcdefghij")  # past the combination bound: any token, checked on the hits
    assert core.enough_of(many) == core.any_of(many)
