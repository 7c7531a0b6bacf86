"""SearchMemories, lexical half: full text (PostgreSQL tsvector / SQLite FTS5) over stemmed
words and Chinese character bigrams, ranked (a hit needs any query token)."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
from agentmesh.memory.v1 import memory_service_pb2 as pb

from services.memory import core, store
from services.memory.service import MIGRATIONS
from shared import db
from shared.settings import Settings
from tests.memory.conftest import rpc_error


async def test_a_search_without_an_embedding_model_says_it_was_lexical_and_why(client) -> None:
    alice = client("alice")
    await alice.write("I love green tea")
    found = await alice.search_response("green tea")
    assert [m.content for m in found.memories] == ["I love green tea"]
    assert (found.mode, found.mode_reason) == (pb.SEARCH_MODE_LEXICAL, "no_embedding_model")


async def test_english_query_finds_memories_with_its_words(client) -> None:
    alice = client("alice")
    await alice.write("I love green tea")
    await alice.write("I drink black coffee")
    assert [m.content for m in await alice.search("green tea")] == ["I love green tea"]
    assert [m.content for m in await alice.search("TEA")] == ["I love green tea"]


async def test_chinese_query_finds_memories_containing_it(client) -> None:
    alice = client("alice")
    await alice.write("我喜欢绿茶")
    await alice.write("我住在杭州")
    assert [m.content for m in await alice.search("绿茶")] == ["我喜欢绿茶"]
    assert [m.content for m in await alice.search("杭州")] == ["我住在杭州"]


async def test_mixed_query_ranks_the_memory_with_the_words_and_the_chinese_first(client) -> None:
    alice = client("alice")
    await alice.write("Lin 喜欢绿茶")
    await alice.write("Wang 喜欢绿茶")
    await alice.write("Wang 住在上海")
    assert [m.content for m in await alice.search("Lin 绿茶")] == ["Lin 喜欢绿茶", "Wang 喜欢绿茶"]


async def test_chinese_word_is_found_inside_unsegmented_sentences(client) -> None:
    alice = client("alice")
    await alice.write("我每天早上都会喝一杯绿茶提神")
    await alice.write("我女儿在上海读大学")
    await alice.write("我对花生过敏")
    assert [m.content for m in await alice.search("绿茶")] == ["我每天早上都会喝一杯绿茶提神"]
    assert [m.content for m in await alice.search("上海")] == ["我女儿在上海读大学"]
    assert [m.content for m in await alice.search("花生")] == ["我对花生过敏"]
    # A question around the word still finds it first.
    hits = await alice.search("我对什么东西过敏？")
    assert hits[0].content == "我对花生过敏"


async def test_english_inflections_match_their_stem(client) -> None:
    alice = client("alice")
    await alice.write("User likes hiking in the mountains")
    await alice.write("User owns two cats")
    assert [m.content for m in await alice.search("Which mountain hikes do I like?")] == [
        "User likes hiking in the mountains"
    ]
    assert [m.content for m in await alice.search("cat")] == ["User owns two cats"]


async def test_query_matching_nothing_finds_nothing(client) -> None:
    alice = client("alice")
    await alice.write("I love green tea")
    assert await alice.search("coffee") == []
    assert await alice.search("咖啡") == []


async def test_better_full_text_match_ranks_first(client) -> None:
    alice = client("alice")
    await alice.write("tea, more tea and always tea")
    await alice.write("I sometimes drink tea with friends after work")
    assert [m.content for m in await alice.search("tea")] == [
        "tea, more tea and always tea",
        "I sometimes drink tea with friends after work",
    ]


async def test_search_follows_updates_and_forgets(client) -> None:
    alice = client("alice")
    first = (await alice.write("I love green tea")).memory
    await alice.write("I LOVE GREEN TEA!")  # same fact, new wording: still one hit
    hits = await alice.search("green tea")
    assert [(m.id, m.content) for m in hits] == [(first.id, "I LOVE GREEN TEA!")]
    await alice.forget_id(first.id)
    assert await alice.search("green tea") == []


async def test_query_syntax_characters_are_plain_text(client) -> None:
    alice = client("alice")
    await alice.write("I love green tea")
    for query in ('"tea', "tea OR (", "tea*", "NEAR(tea", "tea -", "green:tea", "tea^2"):
        await alice.search(query)  # never an error
    assert [m.content for m in await alice.search('"green" tea')] == ["I love green tea"]


async def test_page_size_defaults_to_50_and_is_bounded_by_1000(client) -> None:
    alice = client("alice")
    for i in range(52):
        await alice.write(f"green tea number {i}")
        await alice.write(f"绿茶 第{i}杯")
    assert len(await alice.search("tea")) == 50
    assert len(await alice.search("绿茶")) == 50
    assert len(await alice.search("tea", page_size=5)) == 5
    assert len(await alice.search("tea", page_size=1000)) == 52
    error = await rpc_error(alice.search("tea", page_size=1001))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "page_size"


async def test_empty_query_is_invalid_argument_naming_query(client) -> None:
    error = await rpc_error(client("alice").search(" "))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.violations[0][0] == "query"


async def test_query_without_words_finds_nothing_and_is_no_error(client) -> None:
    alice = client("alice")
    await alice.write("$")
    assert await alice.search("$") == []


async def test_the_users_own_fact_ranks_above_the_same_of_someone_else_or_negated(
    client,
) -> None:
    # The look-alikes are shorter and newer: the full-text rank alone put them first.
    alice = client("alice")
    await alice.write("User is allergic to shellfish and carries an EpiPen")
    await alice.write("User's wife is allergic to shellfish")
    hits = [m.content for m in await alice.search("Am I allergic to shellfish?")]
    assert hits == [
        "User is allergic to shellfish and carries an EpiPen",
        "User's wife is allergic to shellfish",
    ]
    # Asked about the wife, her memory is first.
    hits = [m.content for m in await alice.search("Is my wife allergic to shellfish?")]
    assert hits[0] == "User's wife is allergic to shellfish"
    await alice.write("用户对海鲜过敏，随身带着肾上腺素笔")
    await alice.write("用户的老伴对海鲜过敏")
    hits = [m.content for m in await alice.search("海鲜我能吃吗？")]
    assert hits == ["用户对海鲜过敏，随身带着肾上腺素笔", "用户的老伴对海鲜过敏"]
    await alice.write("User eats pork buns every Sunday morning")
    await alice.write("User does not eat pork")
    hits = [m.content for m in await alice.search("Do I eat pork?")]
    assert hits == ["User eats pork buns every Sunday morning", "User does not eat pork"]


async def test_results_carry_a_relevance_score_between_0_and_1(client) -> None:
    alice = client("alice")
    await alice.write("I love green tea")
    await alice.write("I love green tea and green apples")
    hits = await alice.search("green tea")
    assert hits and all(0 < m.score <= 1 for m in hits)
    assert [m.score for m in hits] == sorted((m.score for m in hits), reverse=True)


async def test_an_owner_without_memories_finds_the_first_one_another_replica_commits(
    settings: Settings,
) -> None:
    """Their search is answered by a probe of the owner's rows (tests/memory/test_plans.py),
    never by a cache: a memory another replica commits is found by the next search."""
    replica, other = (db.create_engine(settings, "memory") for _ in range(2))
    try:
        await db.migrate(replica, MIGRATIONS, settings.schema_for("memory"))
        async with replica.connect() as conn:
            assert await store.search(conn, "alice", "green tea", 10) == []
        async with other.begin() as conn:
            fact = core.validate_write("I love green tea", "", "", [])
            await store.write(conn, "alice", fact, datetime.now(UTC))
        async with replica.connect() as conn:
            hits = await store.search(conn, "alice", "green tea", 10)
            assert [m.content for m in hits] == ["I love green tea"]
            assert await store.search(conn, "bob", "green tea", 10) == []
    finally:
        await replica.dispose()
        await other.dispose()
