"""The centered vector search's own cost (services/memory/centering.py) at the store: one
owner's N memories, half in a CJK script, with random unit vectors (no model), then
`store.search` with the query's vector given, timed; p50, p99 and mean per backend.

    python -m bench.memory_centered [--backends embedded,postgres] [--memories 2000]

What it isolates: reading the owner's vectors, the per-script means and the centered
comparison (issue 31's search latency), without the query's embedding or the lexical half
(bench.memory_search measures those). Run it on two commits to compare them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
import uuid
from pathlib import Path

from bench.memory_search import engine_for
from bench.stats import summary_ms
from services.memory import core, store

DIMS = 384
MODEL = "random"
WARM_UP = 20


async def measure(backend: str, memories: int, searches: int, tmp: Path) -> dict[str, float]:
    rng = random.Random(7)
    engine, _ = await engine_for(backend, tmp, f"mc_{uuid.uuid4().hex[:8]}_")
    try:
        now = store.utc_now()
        async with engine.begin() as conn:
            for i in range(memories):
                text = f"User fact number {i}" if i % 2 else f"用户的第{i}个事实"
                memory, _ = await store.write(
                    conn, "owner", core.validate_write(text, "", "", []), now
                )
                task = store.EmbeddingTask(memory.id, "owner", text, memory.version, "")
                vector = store.unit([rng.gauss(0, 1) for _ in range(DIMS)])
                await store.put_embedding(conn, "owner", task, MODEL, vector, now)
        samples = []
        for _ in range(WARM_UP + searches):
            query = store.unit([rng.gauss(0, 1) for _ in range(DIMS)])
            started = time.perf_counter()
            async with engine.connect() as conn:
                await store.search(conn, "owner", "zzz", 10, embedding=query, model=MODEL)
            samples.append(time.perf_counter() - started)
        return summary_ms(samples[WARM_UP:])
    finally:
        await engine.dispose()


async def main_async(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        return {
            b: await measure(b, args.memories, args.searches, Path(tmp) / b) for b in args.backends
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", type=lambda s: s.split(","), default=["embedded", "postgres"])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--searches", type=int, default=300)
    print(json.dumps(asyncio.run(main_async(parser.parse_args())), indent=1))


if __name__ == "__main__":
    main()
