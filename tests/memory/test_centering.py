"""The vector half centered per script (services.memory.centering), on the backend under
test: an owner whose memories are in two scripts finds a fact asked about in the other
script, which plain cosine loses to any memory in the question's script; an owner in one
script is ranked by plain cosine; PostgreSQL's SQL and SQLite's numpy rank alike."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np
import pytest

from services.memory import centering, core, store
from services.memory.service import MIGRATIONS
from shared.settings import Settings
from tests.conftest import migrated_engine

MODEL = "test-model"
DIMS = 8
FACT = "User is allergic to shellfish"
QUESTION = "螃蟹我能吃吗？"


def _unit(v: Sequence[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def _vector(rng: random.Random, script: float, topic: int | None) -> list[float]:
    """Axis 0 the script (what the model's vectors carry beside the meaning), axes 1..7
    the meaning: a topic's axis strong, the others noise."""
    meaning = [rng.uniform(-0.3, 0.3) for _ in range(DIMS - 1)]
    if topic is not None:
        meaning[topic] = 1.0
    return _unit([script, *meaning])


async def _owner(
    settings: Settings, owner: str, memories: Sequence[tuple[str, list[float]]]
) -> None:
    async with migrated_engine(settings, "memory", MIGRATIONS) as engine:
        async with engine.begin() as conn:
            for text, vector in memories:
                memory, _ = await store.write(
                    conn, owner, core.validate_write(text, "", "", []), store.utc_now()
                )
                task = store.EmbeddingTask(memory.id, owner, text, memory.version, "")
                assert await store.put_embedding(conn, owner, task, MODEL, vector, store.utc_now())


async def _search(settings: Settings, owner: str, query: str, vector: list[float]) -> list[str]:
    async with migrated_engine(settings, "memory", MIGRATIONS) as engine:
        async with engine.connect() as conn:
            found = await store.search(conn, owner, query, 5, embedding=vector, model=MODEL)
    return [m.content for m in found]


def _two_scripts(rng: random.Random) -> list[tuple[str, list[float]]]:
    # English and Chinese memories on every topic but the fact's (topic 0), the fact in
    # English: a Chinese question on topic 0 is nearest, plainly, to any Chinese memory.
    english = [(f"User noted item {i}", _vector(rng, -2.0, 1 + i % 6)) for i in range(12)]
    chinese = [(f"用户记下第{i}件事", _vector(rng, 2.0, 1 + i % 6)) for i in range(12)]
    return [(FACT, _vector(rng, -2.0, 0)), *english, *chinese]


async def test_a_fact_asked_about_in_the_other_script_is_found_first(settings: Settings) -> None:
    rng = random.Random(7)
    held = _two_scripts(rng)
    await _owner(settings, "alice", held)
    question = _vector(rng, 2.0, 0)
    # Plain cosine puts the Chinese memories first (the script axis outweighs the meaning).
    matrix = np.asarray([v for _, v in held], dtype=np.float32)
    plain = [held[i][0] for i in np.argsort(1.0 - matrix @ np.asarray(question))[:5]]
    assert FACT not in plain
    assert (await _search(settings, "alice", QUESTION, question))[0] == FACT


async def test_both_backends_rank_the_centered_vectors_as_the_rule_says(
    settings: Settings,
) -> None:
    rng = random.Random(11)
    held = _two_scripts(rng)
    await _owner(settings, "bob", held)
    for script in (2.0, -2.0):
        question = _vector(rng, script, rng.randrange(DIMS - 1))
        text = QUESTION if script > 0 else "Can I eat crab?"
        matrix = np.asarray([v for _, v in held], dtype=np.float32)
        cjk = np.asarray([centering.is_cjk_text(t) for t, _ in held])
        rule = centering.distances(matrix, cjk, question, centering.is_cjk_text(text))
        expected = [held[i][0] for i in np.argsort(rule, kind="stable")[:5]]
        # The fused ranking holds the vector half's order (no memory shares a word with
        # the question's, but "Can I eat crab?" might: compared by the vector half alone).
        found = await _search(settings, "bob", text, question)
        assert [t for t in found if t in expected] == expected[: len(found)], (found, expected)


@pytest.mark.parametrize("chinese", [0, centering.MIN_PER_SCRIPT - 1])
async def test_an_owner_in_one_script_is_ranked_by_plain_cosine(
    settings: Settings, chinese: int
) -> None:
    rng = random.Random(5)
    held = [(f"User noted item {i}", _vector(rng, -2.0, i % 7)) for i in range(20)]
    held += [(f"用户记下第{i}件事", _vector(rng, 2.0, i % 7)) for i in range(chinese)]
    await _owner(settings, "carol", held)
    question = _vector(rng, -2.0, 3)
    matrix = np.asarray([v for _, v in held], dtype=np.float32)
    plain = [held[i][0] for i in np.argsort(1.0 - matrix @ np.asarray(question), kind="stable")]
    assert await _search(settings, "carol", "?", question) == plain[:5]
