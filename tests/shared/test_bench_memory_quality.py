"""bench.memory_quality's labelled set and filler: what issue 31 asks of them, checked
without the model (the bench itself measures with it)."""

from __future__ import annotations

from collections import Counter

from bench import memory_quality as mq
from services.memory import core


def test_the_committed_set_is_the_one_its_sources_build() -> None:
    assert mq.load_facts() == mq.build_facts()


def test_the_set_holds_500_facts_half_chinese_each_with_its_questions_and_distractors() -> None:
    facts = mq.load_facts()
    assert len(facts) >= 500
    assert Counter(f["lang"] for f in facts) == {"en": len(facts) // 2, "zh": len(facts) // 2}
    for lang in mq.LANGS:
        keys = [core.content_key(f["fact"]) for f in facts if f["lang"] == lang]
        assert len(set(keys)) == len(keys), "a fact written twice in one language"
    for fact in facts:
        assert len(fact["questions"]) == 2 and len(fact["cross"]) == 2
        # Cross-language questions are in the other language.
        assert all(core.is_cjk(q) == (fact["lang"] == "en") for q in fact["cross"])
        kinds = [d["kind"] for d in fact["distractors"]]
        assert "other_person" in kinds and set(kinds) <= {
            "other_person",
            "negation",
            "near_synonym",
        }
        assert fact["fact"] not in [d["text"] for d in fact["distractors"]]


def test_an_other_person_distractor_names_someone_of_the_users_circle() -> None:
    assert mq._other_person("User is allergic to shellfish", "en", 0) == (
        "User's wife is allergic to shellfish"
    )
    assert mq._other_person("User's wife Laura was born on 14 March", "en", 0) == (
        "User's husband's wife Laura was born on 14 March"
    )
    assert mq._other_person("用户对海鲜过敏", "zh", 0) == "用户的妻子对海鲜过敏"
    assert mq._other_person("用户的母亲住在里昂", "zh", 4) == "用户父亲的母亲住在里昂"


def test_each_owner_holds_its_facts_their_distractors_and_filler_up_to_its_size() -> None:
    facts = mq.load_facts()
    for size in (40, 2000):
        owners = mq.owners_at(facts, size)
        assert sum(len(held) for held in owners.values()) == len(facts)
        for owner, held in owners.items():
            texts = mq.texts_of(owner, held, size)
            assert len(texts) == len(set(texts)) == size
            assert {f["fact"] for f in held} <= set(texts)


def test_filler_is_varied_and_the_same_for_every_owner_of_a_language() -> None:
    filler = mq.filler_for("en", 1000)
    assert len(set(filler)) == 1000
    # A smaller owner's filler is a prefix of a larger one's: each text is embedded once.
    assert mq.filler_for("en", 40)[:34] == filler[:34]
    assert sum(core.is_cjk(t) for t in filler) == 150  # 85% in the owner's language
