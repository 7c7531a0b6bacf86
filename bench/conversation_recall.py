"""Conversation recall's costs on the memory service's store (services/memory/conversation_store).

    python -m bench.conversation_recall [--backend embedded|postgres] [--messages 2000]
                                        [--runs 200] [--queries 100]

- index: what every finished chat run adds before its RUN_FINISHED (one IndexConversation:
  one transaction inserting its user message and reply), --runs times, p50/p95 in ms;
- search: the lexical conversation search of an owner holding --messages messages
  (generated English and Chinese sentences), --queries questions, p50/p95 in ms;
- search of an owner with nothing indexed (the probe every recalling run pays).

Lexical only (an embedding model adds its query embedding, measured by bench.memory_search).
Prints one JSON line; on PostgreSQL drops its schema.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from bench.memory_search import engine_for
from services.memory import conversation_store
from services.memory.conversation import Message

_SUBJECTS = ["my sister", "my landlord", "the dentist", "our team lead", "my neighbour", "Tom"]
_VERBS = ["moved to", "asked about", "forgot", "recommended", "booked", "talked about"]
_OBJECTS = ["Lisbon", "the blue bike", "a sushi place", "the quarterly report", "yoga classes"]
_ZH = [
    "我妹妹搬到了杭州",
    "房东问了水费的事",
    "牙医推荐了新的牙刷",
    "周末去爬了黄山",
    "我们组长喜欢喝咖啡",
]
_QUERIES = ["Where did my sister move?", "sushi place", "blue bike", "房东", "黄山", "yoga"]


def _sentence(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return f"{rng.choice(_ZH)}，{rng.randint(1, 999)}"
    said = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
    return f"{said} ({rng.randint(1, 999)})"


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(ordered[len(ordered) // 2] * 1000, 2),
        "p95": round(ordered[int(len(ordered) * 0.95)] * 1000, 2),
    }


async def main(backend: str, messages: int, runs: int, queries: int) -> dict[str, object]:
    rng = random.Random(7)
    prefix = f"bc{uuid.uuid4().hex[:8]}_"
    with tempfile.TemporaryDirectory() as tmp:
        engine, settings = await engine_for(backend, Path(tmp), prefix)
        try:
            owner, now = "bench-owner", datetime.now(UTC)
            batch: list[Message] = []
            for i in range(messages):
                when = now - timedelta(minutes=messages - i)
                batch.append(Message(f"m{i}", f"t{i // 20}", "user", _sentence(rng), when))
                if len(batch) == 100:
                    async with engine.begin() as conn:
                        await conversation_store.index(conn, owner, batch, now)
                    batch = []
            if batch:
                async with engine.begin() as conn:
                    await conversation_store.index(conn, owner, batch, now)
            index_times = []
            for r in range(runs):
                pair = [
                    Message(f"r{r}-in", f"run-{r}", "user", _sentence(rng), now),
                    Message(f"r{r}-out", f"run-{r}", "assistant", _sentence(rng), now),
                ]
                start = time.perf_counter()
                async with engine.begin() as conn:
                    await conversation_store.index(conn, "runner", pair, now)
                index_times.append(time.perf_counter() - start)
            search_times, empty_times = [], []
            for q in range(queries):
                query = _QUERIES[q % len(_QUERIES)]
                start = time.perf_counter()
                async with engine.connect() as conn:
                    await conversation_store.search(conn, owner, query, 5)
                search_times.append(time.perf_counter() - start)
                start = time.perf_counter()
                async with engine.connect() as conn:
                    await conversation_store.search(conn, "nobody", query, 5)
                empty_times.append(time.perf_counter() - start)
        finally:
            if backend == "postgres":
                async with engine.begin() as conn:
                    schema = settings.schema_for("memory")
                    await conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            await engine.dispose()
    return {
        "backend": backend,
        "messages": messages,
        "index_run_ms": _ms(index_times),
        "search_ms": _ms(search_times),
        "search_nothing_indexed_ms": _ms(empty_times),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["embedded", "postgres"], default="embedded")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    result = asyncio.run(main(args.backend, args.messages, args.runs, args.queries))
    print(json.dumps(result))
