"""Memory consolidation on issue 31's labelled set: duplicates merged, wrong merges, and what
consolidation costs a write.

    python -m bench.memory_consolidation [--backends embedded,postgres] [--sizes 40,2000]
                                         [--latency-writes 100] [--latency-only] [--out results]

Each owner holds what bench.memory_quality gives it at each size (its facts, their labelled
distractors: the same statement about another person, an opposite-meaning one, a near
synonym; filler up to the size), written through the memory service's own WriteMemory unit
of work (servicer.write_fact: consolidation on write). Then each fact is written again as
duplicates made by rule, and last as its opposite where a rule makes one ("User is not ...",
"User does not have ...", "用户不喜欢...", "用户对...不过敏": it supersedes the fact):
  - surface (English only): "The user ..." with a final period for "User ..." (the same
    words: merged on write);
  - first person: "I am / I have / My / I <verb>" for "User is / has / User's / <verb>s",
    "我" for "用户" (other words, the same meaning: only vectors can find them).
Everything is embedded by the local model (vectors cached in
results/memory-quality-vectors.npz, as bench.memory_quality), and the owner consolidated
once (servicer.consolidate_owner: words and vectors at cosine >= DUPLICATE_COSINE).

Counted, per size and backend: duplicates merged on write and by the pass (of those
written); opposites written and what they superseded (their own fact, or wrongly another);
wrong merges (a merge of two memories that are not a fact and its own duplicate,
or two filler texts); supersessions by the pair's labels; the pass's time. The cosines of
each fact with its duplicates and its distractors are reported (what DUPLICATE_COSINE
separates). Write latency: at the size, --latency-writes new memories per backend, each
written in turn the way WriteMemory wrote before consolidation (store.write and its change
record) and through write_fact, interleaved so the machine's load falls on both alike,
English and Chinese texts alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from bench.memory_quality import (
    CachedClient,
    filler,
    load_facts,
    owners_at,
    texts_of,
)
from bench.memory_search import embedding_config, engine_for
from services.memory import consolidation, core, store
from services.memory.embedding_server import LocalEmbeddingServer
from services.memory.embeddings import Embedder, EmbeddingClient
from services.memory.servicer import consolidate_owner, write_fact

ROOT = Path(__file__).resolve().parent.parent

_FIRST_PERSON_EN = [
    (re.compile(r"^User's "), "My "),
    (re.compile(r"^User is "), "I am "),
    (re.compile(r"^User has "), "I have "),
    (re.compile(r"^User was "), "I was "),
    (re.compile(r"^User does not "), "I do not "),
    (re.compile(r"^User does "), "I do "),
    (re.compile(r"^User goes "), "I go "),
    (re.compile(r"^User (\w+)s "), r"I \1 "),
]


def duplicates_of(fact: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, text) of the rule-made duplicates of a fact (the module doc)."""
    text = fact["fact"]
    if fact["lang"] == "zh":
        return (
            [("first_person", "我" + text.removeprefix("用户"))] if text.startswith("用户") else []
        )
    out = []
    if text.startswith(("User ", "User's ")):
        out.append(("surface", "The user" + text.removeprefix("User") + "."))
    for pattern, replacement in _FIRST_PERSON_EN:
        if pattern.match(text):
            out.append(("first_person", pattern.sub(replacement, text, count=1)))
            break
    return out


_OPPOSITE_EN = [
    (re.compile(r"^(User(?:'s [\w' -]+?)?) (is|was|are) "), r"\1 \2 not "),
    (re.compile(r"^User has "), "User does not have "),
    (re.compile(r"^User (?!does |goes )(\w+)s "), r"User does not \1 "),
]
_OPPOSITE_ZH = [
    (re.compile(r"^用户(是|有|喜欢|会|在|能)"), r"用户不\1"),
    (re.compile(r"^用户对(.+)过敏$"), r"用户对\1不过敏"),
]


def contradiction_of(fact: dict[str, Any]) -> str | None:
    """The fact's opposite made by rule ("User is not ...", "用户不喜欢..."), or None."""
    text = fact["fact"]
    if core.negated(text):
        return None
    for pattern, replacement in _OPPOSITE_ZH if fact["lang"] == "zh" else _OPPOSITE_EN:
        if pattern.match(text):
            opposite = pattern.sub(replacement, text, count=1)
            return opposite.replace("不有", "没有")
    return None


def labels_of(held: Sequence[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """text -> (label, fact id) of an owner's labelled texts (the rest is filler)."""
    labels: dict[str, tuple[str, str]] = {}
    for fact in held:
        for d in fact["distractors"]:
            labels.setdefault(d["text"], (d["kind"], fact["id"]))
        labels[fact["fact"]] = ("fact", fact["id"])
    return labels


def pair_kind(
    labels: dict[str, tuple[str, str]], dups: dict[str, tuple[str, str]], a: str, b: str
) -> str:
    """What a merged or superseded pair is: fact+own duplicate, filler+filler, or the two
    labels (a wrong merge unless the first)."""
    la = dups.get(a) or labels.get(a, ("filler", ""))
    lb = dups.get(b) or labels.get(b, ("filler", ""))
    kinds = {la[0], lb[0]}
    if la[1] and la[1] == lb[1] and kinds <= {"fact", "surface", "first_person"}:
        return "own_duplicate"
    if la[1] and la[1] == lb[1] and kinds == {"fact", "opposite"}:
        return "own_opposite"
    return "+".join(sorted(kinds)) if len(kinds) > 1 else f"{la[0]}+{lb[0]}"


async def run_size(
    backend: str, size: int, facts: Sequence[dict[str, Any]], client: CachedClient, tmp: Path
) -> dict[str, Any]:
    owners = owners_at(facts, size)
    prefix = f"mc_{uuid.uuid4().hex[:8]}_"
    engine, settings = await engine_for(backend, tmp / f"{size}", prefix)
    out: dict[str, Any] = {"owners": len(owners)}
    merged_on_write: Counter[str] = Counter()
    superseded_on_write: Counter[str] = Counter()
    written_dups: Counter[str] = Counter()
    written_opposites = 0
    merged_dups: Counter[str] = Counter()
    pass_merges: Counter[str] = Counter()
    pass_supersessions: Counter[str] = Counter()
    pass_seconds = []
    try:
        texts_by_owner: dict[str, dict[str, str]] = {}  # owner -> memory id -> text
        dups_by_owner: dict[str, dict[str, tuple[str, str]]] = {}
        for owner, held in owners.items():
            labels = labels_of(held)
            dups = {t: (kind, f["id"]) for f in held for kind, t in duplicates_of(f)}
            opposites = {t: ("opposite", f["id"]) for f in held if (t := contradiction_of(f))}
            dups_by_owner[owner] = dups
            texts_by_owner[owner] = {}
            async with engine.begin() as conn:
                for text in [*texts_of(owner, held, size), *dups, *opposites]:
                    fact = core.validate_write(text, "", "", [])
                    done = await write_fact(conn, owner, fact, "run", store.utc_now())
                    texts_by_owner[owner][done.memory.id] = done.memory.content
                    if text in dups:
                        written_dups[dups[text][0]] += 1
                    if done.merged:
                        kind = pair_kind(labels, dups, done.memory.content, text)
                        merged_on_write[kind] += 1
                        if kind == "own_duplicate":
                            merged_dups[dups[text][0]] += 1
                    if text in opposites:
                        written_opposites += 1
                    for old in done.superseded:
                        kind = pair_kind(labels, dups | opposites, text, old.content)
                        superseded_on_write[kind] += 1
        embedder = Embedder(engine, client)  # type: ignore[arg-type]  # the cache stands in
        while await embedder.embed_batch():
            pass
        client.save()
        for owner, held in owners.items():
            labels, dups = labels_of(held), dups_by_owner[owner]
            started = time.perf_counter()
            async with engine.begin() as conn:
                plan, _ = await consolidate_owner(
                    conn, owner, "api", store.utc_now(), client.config
                )
            pass_seconds.append(time.perf_counter() - started)
            for kept, merged in plan.merges:
                for m in merged:
                    kind = pair_kind(labels, dups, kept.content, m.content)
                    pass_merges[kind] += 1
                    if kind == "own_duplicate":
                        dup = dups.get(m.content) or dups.get(kept.content)
                        if dup is not None:
                            merged_dups[dup[0]] += 1
            for newer, older in plan.supersessions:
                for m in older:
                    pass_supersessions[pair_kind(labels, dups, newer.content, m.content)] += 1
        wrong = {
            k: v
            for k, v in (merged_on_write + pass_merges).items()
            if k not in ("own_duplicate", "filler+filler")
        }
        out |= {
            "duplicates_written": dict(written_dups),
            "duplicates_merged": dict(merged_dups),
            "merged_on_write": dict(merged_on_write),
            "opposites_written": written_opposites,
            "superseded_on_write": dict(superseded_on_write),
            "pass_merges": dict(pass_merges),
            "pass_supersessions": dict(pass_supersessions),
            "wrong_merges": sum(wrong.values()),
            "wrong_merge_kinds": wrong,
            "pass_seconds_p50": round(float(np.median(pass_seconds)), 3),
            "pass_seconds_max": round(max(pass_seconds), 3),
        }
        return out
    finally:
        if backend == "postgres":
            async with engine.begin() as conn:
                schema = settings.schema_for("memory")
                await conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await engine.dispose()


async def write_latency(backend: str, size: int, n: int, tmp: Path) -> dict[str, Any]:
    """Writes of new memories into owners of `size` memories: before (store.write and its
    change record, as WriteMemory wrote before consolidation) and after (write_fact),
    interleaved."""
    prefix = f"mcl_{uuid.uuid4().hex[:8]}_"
    engine, settings = await engine_for(backend, tmp / f"latency-{size}", prefix)
    samples: dict[str, list[float]] = {"before": [], "after": []}
    try:
        facts = load_facts()
        held = [f for f in facts if f["lang"] == "en"]
        owner = f"mcl-{size}"
        async with engine.begin() as conn:
            for text in texts_of(owner, held, size):
                write = core.validate_write(text, "", "", [])
                await write_fact(conn, owner, write, "run", store.utc_now())
        # Both languages (a Chinese text's many bigrams ask the index more than English words).
        en, zh = filler("en", n, random.Random("latency")), filler("zh", n, random.Random("l"))
        fresh = [t for pair in zip(en, zh, strict=True) for t in pair]
        for i, text in enumerate(fresh):
            fact = core.validate_write(text + f" ({i})", "", "", [])
            how = "after" if (i // 2) % 2 else "before"  # each language both ways
            started = time.perf_counter()
            async with engine.begin() as conn:
                now = store.utc_now()
                if how == "after":
                    await write_fact(conn, owner, fact, "run", now)
                else:
                    memory, created = await store.write(conn, owner, fact, now)
                    change = core.write_change(memory, created, fact, "run")
                    await store.record_changes(conn, owner, [change], now)
            samples[how].append(time.perf_counter() - started)
    finally:
        if backend == "postgres":
            async with engine.begin() as conn:
                schema = settings.schema_for("memory")
                await conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await engine.dispose()
    return {how: _ms(values) for how, values in samples.items()}


def _ms(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {"p50_ms": at(0.5), "p95_ms": at(0.95), "n": len(ordered)}


async def cosines(facts: Sequence[dict[str, Any]], client: CachedClient) -> dict[str, Any]:
    """Per kind of pair, the cosines of each fact with its duplicates and its distractors:
    min / p50 / max (what DUPLICATE_COSINE must separate)."""
    pairs: dict[str, list[float]] = {}
    texts = [fact["fact"] for fact in facts]
    others = []
    for fact in facts:
        mine = [*duplicates_of(fact), *((d["kind"], d["text"]) for d in fact["distractors"])]
        others.append(mine)
        texts += [t for _, t in mine]
    # One call: the cache embeds what it lacks in batches of 32.
    vectors = dict(zip(texts, await client.embed(texts, query=False), strict=True))
    for fact, mine in zip(facts, others, strict=True):
        for kind, text in mine:
            cosine = float(np.dot(vectors[fact["fact"]], vectors[text]))
            pairs.setdefault(f"{fact['lang']}:{kind}", []).append(cosine)
    return {
        kind: {
            "n": len(v),
            "min": round(min(v), 3),
            "p50": round(float(np.median(v)), 3),
            "max": round(max(v), 3),
            f"at_or_above_{consolidation.DUPLICATE_COSINE}": sum(
                x >= consolidation.DUPLICATE_COSINE for x in v
            ),
        }
        for kind, v in sorted(pairs.items())
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    facts = load_facts()
    server = LocalEmbeddingServer(threads=os.cpu_count() or 1)
    server.start(timeout=120)
    raw = EmbeddingClient(embedding_config(server))
    client = CachedClient(raw)
    report: dict[str, Any] = {
        "facts": len(facts),
        "model": raw.config.model,
        "duplicate_cosine": consolidation.DUPLICATE_COSINE,
        "sizes": {},
        "write_latency": {},
    }
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report["cosines"] = await cosines(facts, client)
            client.save()
            print(json.dumps(report["cosines"], indent=1), flush=True)
            for size in [] if args.latency_only else args.sizes:
                for backend in args.backends:
                    result = await run_size(backend, size, facts, client, Path(tmp))
                    report["sizes"].setdefault(str(size), {})[backend] = result
                    print(json.dumps({size: {backend: result}}), flush=True)
            if args.latency_writes:
                size = max(args.sizes)
                for backend in args.backends:
                    latency = await write_latency(backend, size, args.latency_writes, Path(tmp))
                    report["write_latency"].setdefault(str(size), {})[backend] = latency
                    print(json.dumps({"write_latency": {size: {backend: latency}}}), flush=True)
    finally:
        client.save()
        await raw.aclose()
        server.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", type=lambda s: s.split(","), default=["embedded", "postgres"])
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[40, 2000]
    )
    parser.add_argument("--latency-writes", type=int, default=100)
    parser.add_argument(
        "--latency-only", action="store_true", help="only the write latency (at the largest size)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory-consolidation.json").write_text(
        json.dumps(report, indent=1, ensure_ascii=False)
    )
    print(json.dumps(report, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
