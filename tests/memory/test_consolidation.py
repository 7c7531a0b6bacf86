"""Memory consolidation through MemoryService (services/memory/consolidation.py): a write of
a fact the owner has in other words is merged into its memory, a write that contradicts a
memory supersedes it, and ConsolidateMemories does both over all of an owner's memories
(with an embedding model, also for memories whose vectors are near); never across people,
polarities or owners, and every merge and supersession is on record."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from agentmesh.memory.v1 import memory_service_pb2 as pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as pb_grpc

from services.launcher import free_port
from services.memory import consolidation, core, store
from services.memory.core import Memory
from services.memory.service import MIGRATIONS, build
from shared.settings import Settings
from tests.conftest import migrated_engine
from tests.grpc_helpers import channel, running_service
from tests.memory.conftest import Client
from tests.memory.test_changes import changes, update


async def consolidate(c: Client) -> pb.ConsolidateMemoriesResponse:
    return await c.stub.ConsolidateMemories(
        pb.ConsolidateMemoriesRequest(actor="api"), metadata=c._md()
    )


async def contents(c: Client) -> set[str]:
    return {m.content for m in await c.list_all()}


async def test_a_fact_written_again_in_other_words_is_merged_into_its_memory(
    client: Callable[[str], Client],
) -> None:
    alice = client("alice")
    first = await alice.write(
        "User is allergic to penicillin", source_run_id="job-1", source_message_ids=["m1"]
    )
    again = await alice.write(
        "The user is allergic to penicillin!", source_run_id="job-2", source_message_ids=["m2"]
    )
    assert (again.created, again.merged) == (False, True)
    assert again.memory.id == first.memory.id
    assert again.memory.content == "User is allergic to penicillin"
    assert list(again.memory.source_message_ids) == ["m1", "m2"]
    assert await contents(alice) == {"User is allergic to penicillin"}
    assert list((await alice.get(first.memory.id)).source_message_ids) == ["m1", "m2"]
    merge = (await changes(alice))[-1]
    assert (merge.action, merge.memory_id, merge.previous_content) == (
        "merge",
        first.memory.id,
        "The user is allergic to penicillin!",
    )
    assert (merge.source_run_id, list(merge.source_message_ids)) == ("job-2", ["m2"])


async def test_a_write_that_contradicts_a_memory_supersedes_it(
    client: Callable[[str], Client],
) -> None:
    alice = client("alice")
    pork = (await alice.write("User eats pork")).memory
    shanghai = (await alice.write("用户住在上海")).memory
    written = await alice.write("User does not eat pork", source_run_id="job-3")
    assert written.created and not written.merged
    assert [m.id for m in written.superseded_memories] == [pork.id]
    moved = await alice.write("用户住在杭州")
    assert [m.content for m in moved.superseded_memories] == ["用户住在上海"]
    assert await contents(alice) == {"User does not eat pork", "用户住在杭州"}
    superseded = [c for c in await changes(alice) if c.action == "supersede"]
    assert [(c.memory_id, c.content, c.previous_content) for c in superseded] == [
        (pork.id, "User does not eat pork", "User eats pork"),
        (shanghai.id, "用户住在杭州", "用户住在上海"),
    ]
    assert superseded[0].source_run_id == "job-3"
    assert written.memory.id in superseded[0].reason


async def test_facts_about_other_people_opposite_or_many_valued_are_all_kept(
    client: Callable[[str], Client],
) -> None:
    alice = client("alice")
    facts = [
        "User is allergic to penicillin",
        "User's wife is allergic to penicillin",
        "User is not allergic to aspirin",
        "User is allergic to pollen in spring",
        "User likes green tea",
        "User likes coffee",
        "User's brother lives in Shanghai",
        "User lives in Hangzhou",
        "用户对海鲜过敏",
        "用户的老伴对海鲜不过敏",
        "用户的丈夫对海鲜过敏",
    ]
    for fact in facts:
        written = await alice.write(fact)
        assert written.created and not written.merged, fact
        assert list(written.superseded_memories) == [], fact
    assert await contents(alice) == set(facts)
    done = await consolidate(alice)
    assert (done.merged_count, done.superseded_count, list(done.changes)) == (0, 0, [])
    assert await contents(alice) == set(facts)


async def test_a_write_names_the_similar_memories_it_leaves(
    client: Callable[[str], Client],
) -> None:
    alice = client("alice")
    morning = (await alice.write("User drinks green tea every morning")).memory
    await alice.write("User's wife drinks green tea")
    written = await alice.write("User drinks green tea")
    assert written.created and not written.merged
    assert [m.id for m in written.similar_memories] == [morning.id]
    assert len(await alice.list_all()) == 3


async def test_consolidate_merges_and_supersedes_what_edits_left_behind(
    client: Callable[[str], Client],
) -> None:
    alice, bob = client("alice"), client("bob")
    tea = (await alice.write("User likes tea", source_message_ids=["m1"])).memory
    chess = (await alice.write("User plays chess", source_message_ids=["m2"])).memory
    shanghai = (await alice.write("User lives in Shanghai")).memory
    music = (await alice.write("User plays the violin")).memory
    # Edits are not consolidated: they leave a duplicate and a contradiction.
    await update(alice, id=chess.id, content="The user likes tea.")
    await update(alice, id=music.id, content="User lives in Hangzhou")
    for fact in ("User likes tea", "The user likes tea."):
        await bob.write(fact)
    # Bob's duplicates are bob's: written before alice's edits made hers, left alone.
    bob_before = await contents(bob)

    done = await consolidate(alice)
    assert (done.merged_count, done.superseded_count) == (1, 1)
    assert await contents(alice) == {"User likes tea", "User lives in Hangzhou"}
    assert list((await alice.get(tea.id)).source_message_ids) == ["m1", "m2"]
    assert [(c.action, c.memory_id, c.actor) for c in done.changes] == [
        ("merge", chess.id, "api"),
        ("supersede", shanghai.id, "api"),
    ]
    assert done.changes[0].content == "User likes tea"
    assert done.changes[1].content == "User lives in Hangzhou"
    recorded = [(c.action, c.memory_id) for c in await changes(alice)][-2:]
    assert recorded == [("merge", chess.id), ("supersede", shanghai.id)]
    assert await contents(bob) == bob_before

    again = await consolidate(alice)
    assert (again.merged_count, again.superseded_count) == (0, 0)


async def test_consolidate_merges_memories_whose_vectors_are_near_about_one_person(
    settings: Settings,
) -> None:
    """With an embedding model, duplicates by meaning: the stored vectors (set here by
    hand; the model itself is not reached) at a cosine of 0.98 or more, 90% of the words
    shared, the same person and polarity."""
    model = settings.model_copy(update={"embedding_base_url": f"http://127.0.0.1:{free_port()}/v1"})
    dims = model.embedding_dimensions

    def near(i: int, tilt: float = 0.0) -> list[float]:
        return store.unit([1.0 if j == i else (tilt if j == i + 1 else 0.0) for j in range(dims)])

    async with running_service("memory", build, model) as address, channel(address) as ch:
        alice = Client(pb_grpc.MemoryServiceStub(ch), "alice")
        vectors = {
            "User walks a brown dog named Max daily along the river at dawn": near(0),
            # cosine 0.995, 9 of 10 words: the same fact.
            "User walks a brown dog named Max daily along the river at dawn in Leeds": near(0, 0.1),
            # As near by the vectors, but other words, another person, the opposite.
            "User owns a dog called Max": near(0, 0.1),
            "User's wife walks a brown dog named Max daily in Leeds": near(0, 0.1),
            "User never walks a brown dog named Rex daily in Leeds": near(0, 0.1),
            "User likes green tea": near(2),
            "User likes green tea with honey": near(2, 0.5),  # cosine 0.89
        }
        ids = {fact: (await alice.write(fact)).memory.id for fact in vectors}
        async with migrated_engine(model, "memory", MIGRATIONS) as engine, engine.begin() as conn:
            now = store.utc_now()
            for fact, vector in vectors.items():
                task = store.EmbeddingTask(ids[fact], "alice", fact, 1, "")
                await store.put_embedding(conn, "alice", task, model.embedding_model, vector, now)
        done = await consolidate(alice)
        assert (done.merged_count, done.superseded_count) == (1, 0)
        [merge] = done.changes
        assert (merge.memory_id, merge.content) == (
            ids["User walks a brown dog named Max daily along the river at dawn in Leeds"],
            "User walks a brown dog named Max daily along the river at dawn",
        )
        gone = "User walks a brown dog named Max daily along the river at dawn in Leeds"
        assert await contents(alice) == set(vectors) - {gone}


def _memory(i: int, content: str) -> Memory:
    when = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=i)
    key = core.content_key(content)
    return Memory(f"m{i}", "alice", content, key, "fact", "", (), when, when, 1)


def test_a_chain_of_near_memories_never_merges_its_two_ends() -> None:
    """a~b and b~c by their vectors, a and c not: b joins a, c stays (compared with the
    kept memories only)."""
    cat = "User has a grey cat named Momo adopted from a shelter in Osaka last spring"
    cats = [cat, cat + " city"]
    a, b, c = (_memory(i, t) for i, t in enumerate([*cats, cats[1] + " centre"]))
    near = {a.id: {b.id: 0.98}, b.id: {a.id: 0.98, c.id: 0.98}, c.id: {b.id: 0.98}}
    plan = consolidation.plan([a, b, c], near)
    assert [(kept.id, [m.id for m in merged]) for kept, merged in plan.merges] == [("m0", ["m1"])]
    assert plan.supersessions == []


def test_values_in_two_languages_never_supersede_each_other() -> None:
    facts = [_memory(0, "User lives in Hangzhou"), _memory(1, "用户住在杭州")]
    assert consolidation.plan(facts) == consolidation.Plan()
    moved = consolidation.plan([*facts, _memory(2, "User lives in Suzhou")])
    assert [(n.id, [m.id for m in old]) for n, old in moved.supersessions] == [("m2", ["m0"])]


@pytest.mark.parametrize(
    ("older", "newer", "superseded"),
    [
        ("User lives in Rotterdam", "User lives in Utrecht", True),
        ("用户住在鹿特丹", "用户住在上海", True),
        ("用户有车", "用户没有车", True),
        ("User has a car", "User does not have a car", True),
        # Descriptions and dates may hold beside the older value.
        ("User lives in Rotterdam", "User lives in a house with a garden", False),
        ("用户住在鹿特丹", "用户住在中央公园附近", False),
        ("User's birthday is on 9 July", "User's birthday is in autumn", False),
        # Other people, other statements.
        ("User lives in Rotterdam", "User's brother lives in Utrecht", False),
        ("User has a car", "User does not have a bike", False),
    ],
)
def test_which_newer_memory_supersedes_an_older_one(
    older: str, newer: str, superseded: bool
) -> None:
    plan = consolidation.plan([_memory(0, older), _memory(1, newer)])
    assert bool(plan.supersessions) == superseded
