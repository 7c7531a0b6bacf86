"""History service at scale: ListHistory (page of 50) and LoadContext (a 200-message thread)
against PostgreSQL holding N messages across M threads.

    AGENTMESH_BENCH_PG_URL=postgresql://postgres@127.0.0.1:5432/test \\
        python -m bench.history --messages 1000000 --threads 10000

Loads the data into a fresh schema with COPY (secondary indexes dropped during the load
and rebuilt from their own definitions afterwards, the foreign key added back and
validated in one pass), starts the real history service, and
measures two ways:
  * service-side: the servicer's coroutine awaited directly (request object in, response
    object out; everything the service does, SQL round trips included, minus gRPC I/O);
  * gRPC: a tight loop of unary calls through a real grpc.aio server on 127.0.0.1 (client
    in the same process, so the client's own work is included).
It prints EXPLAIN (ANALYZE, BUFFERS) of the statements the servicer actually sent (custom
and generic plans), writes results/history-<time>.json, and drops the schema.
`--reuse PREFIX` keeps the loaded schema (PREFIX + "history") and reuses it when it already
holds the requested counts, to iterate on the service without the ~50 s load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from agentmesh.history.v1 import history_service_pb2 as pb
from agentmesh.history.v1 import history_service_pb2_grpc as pb_grpc
from agentmesh.type.v1 import message_pb2
from sqlalchemy import event

from bench.stats import summary_ms
from services.history.service import MIGRATIONS, SERVICE_NAME
from services.history.servicer import HistoryServicer
from shared import db
from shared.identity import call_metadata
from shared.server import GrpcServer, ServiceParts
from shared.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
OWNERS_PER = 10  # threads per owner
BIG = 200  # messages in a "context" thread


class _Context:
    """The few ServicerContext methods the servicer uses, for direct (service-side) calls."""

    def __init__(self, owner: str) -> None:
        self._md = call_metadata(owner)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._md


def _sizes(messages: int, threads: int) -> list[int]:
    """Every 10th thread holds BIG messages; the rest share what remains evenly."""
    big = [i for i in range(threads) if i % 10 == 0]
    rest = threads - len(big)
    left = messages - BIG * len(big)
    if left < rest:
        raise SystemExit("too few messages for that many threads")
    base, extra = divmod(left, rest)
    out, k = [], 0
    for i in range(threads):
        if i % 10 == 0:
            out.append(BIG)
        else:
            out.append(base + (1 if k < extra else 0))
            k += 1
    return out


def _rows(
    sizes: list[int], start: datetime
) -> Iterator[tuple[tuple[Any, ...] | None, tuple[Any, ...]]]:
    """(thread row or None, message row) for every message; thread rows come at their end."""
    rnd = random.Random(7)
    words = ["hello", "memory", "schedule", "agent", "reply", "tool", "today", "context"]
    # A pool of texts and metadata documents, reused: generating 1M distinct ones would
    # make the loader, not COPY, the slow part.
    blocks = [
        [{"text": {"text": " ".join(rnd.choice(words) for _ in range(n))}}]
        for n in (rnd.randint(10, 40) for _ in range(997))
    ]
    texts = [json.dumps(b) for b in blocks]
    metas = {
        (mode, mask): json.dumps(
            {
                "hidden_from_user": mask & 1 == 0,
                "origin": mode,
                "executor": "memory" if mode == "automation" else "worker",
                "execution_profile_name": (
                    "automation_memory_default" if mode == "automation" else "chat_default"
                ),
                "extra": {},
            }
        )
        for mode, mask in (("chat", 3), ("automation", 0), ("automation", 1))
    }
    seq = 0
    for t, size in enumerate(sizes):
        owner = f"owner{t // OWNERS_PER:05d}"
        thread = f"th{t:06d}"
        automation = t % 10 == 9  # one thread in ten is a memory job's thread
        mode = "automation" if automation else "chat"
        created = start + timedelta(seconds=t)
        first = created
        for pos in range(1, size + 1):
            seq += 1
            created += timedelta(seconds=1 + seq % 120)
            user = pos % 2 == 1
            kind = "user_message" if user else "agent_reply"
            mask = (0 if user else 1) if automation else 3
            content = texts[seq % len(texts)]
            meta = metas[(mode, mask)]
            executor = "memory" if automation else "worker"
            profile = "automation_memory_default" if automation else "chat_default"
            run_id = f"r{t}-{(pos + 1) // 2}"
            wire = message_pb2.Message(
                id=f"m{seq:09d}",
                role=message_pb2.ROLE_USER if user else message_pb2.ROLE_ASSISTANT,
                content=blocks[seq % len(blocks)],
                metadata={
                    "hidden_from_user": mask & 1 == 0,
                    "origin": message_pb2.RUNTIME_MODE_AUTOMATION
                    if automation
                    else message_pb2.RUNTIME_MODE_CHAT,
                    "executor": 2 if automation else 1,
                    "execution_profile_name": profile,
                },
                created_at={
                    "seconds": int(created.timestamp()),
                    "nanos": created.microsecond * 1000,
                },
                finished_reason="" if user else "stop",
                thread_id=thread,
                run_id=run_id,
                kind=message_pb2.MESSAGE_KIND_USER_MESSAGE
                if user
                else message_pb2.MESSAGE_KIND_AGENT_REPLY,
                visibility_mask=mask,
                position=pos,
            ).SerializeToString()
            message = (
                owner,
                f"m{seq:09d}",
                thread,
                pos,
                run_id,
                "user" if user else "assistant",
                kind,
                mask,
                "",
                content,
                meta,
                mode,
                executor,
                profile,
                0,
                0,
                "" if user else "stop",
                created,
                wire,
            )
            thread_row = (owner, thread, mode, first, created, size) if pos == size else None
            yield thread_row, message


MESSAGE_COLUMNS = [
    "owner_id",
    "id",
    "thread_id",
    "position",
    "run_id",
    "role",
    "kind",
    "visibility_mask",
    "name",
    "content",
    "metadata",
    "origin",
    "executor",
    "execution_profile_name",
    "input_tokens",
    "output_tokens",
    "finished_reason",
    "created_at",
    "message_pb",
]
THREAD_COLUMNS = ["owner_id", "id", "runtime_mode", "create_time", "update_time", "message_count"]


async def load(pg_url: str, schema: str, messages: int, threads: int) -> dict[str, float]:
    conn = await asyncpg.connect(pg_url, server_settings={"search_path": schema})
    try:
        indexes = await conn.fetch(
            """SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1
               AND indexname NOT IN (SELECT conname FROM pg_constraint)""",
            schema,
        )
        for ix in indexes:
            await conn.execute(f'DROP INDEX "{schema}"."{ix["indexname"]}"')
        start = datetime.now(UTC) - timedelta(days=30)
        t0 = time.perf_counter()
        batch: list[tuple[Any, ...]] = []
        thread_rows: list[tuple[Any, ...]] = []
        # Messages reference threads: the foreign key waits until the end of the load.
        await conn.execute("ALTER TABLE messages DROP CONSTRAINT fk_messages_thread")
        for thread_row, message in _rows(_sizes(messages, threads), start):
            if thread_row is not None:
                thread_rows.append(thread_row)
            batch.append(message)
            if len(batch) >= 50_000:
                await conn.copy_records_to_table(
                    "messages", records=batch, columns=MESSAGE_COLUMNS, schema_name=schema
                )
                batch.clear()
        if batch:
            await conn.copy_records_to_table(
                "messages", records=batch, columns=MESSAGE_COLUMNS, schema_name=schema
            )
        await conn.copy_records_to_table(
            "threads", records=thread_rows, columns=THREAD_COLUMNS, schema_name=schema
        )
        t1 = time.perf_counter()
        await conn.execute(
            """ALTER TABLE messages ADD CONSTRAINT fk_messages_thread FOREIGN KEY
               (owner_id, thread_id) REFERENCES threads (owner_id, id)"""
        )
        for ix in indexes:
            await conn.execute(ix["indexdef"])
        await conn.execute("ANALYZE")
        t2 = time.perf_counter()
        return {"copy_seconds": round(t1 - t0, 1), "index_and_analyze_seconds": round(t2 - t1, 1)}
    finally:
        await conn.close()


async def _loaded(pg_url: str, schema: str) -> tuple[int, int] | None:
    """(messages, threads) held by a schema an earlier --reuse run loaded, if any."""
    conn = await asyncpg.connect(pg_url)
    try:
        if not await conn.fetchval("SELECT to_regclass($1)", f'"{schema}".threads'):
            return None
        return (
            await conn.fetchval(f'SELECT count(*) FROM "{schema}".messages'),
            await conn.fetchval(f'SELECT count(*) FROM "{schema}".threads'),
        )
    finally:
        await conn.close()


async def _timed(call: Callable[[], Awaitable[Any]], n: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        await call()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        await call()
        times.append(time.perf_counter() - t)
    return summary_ms(times)


async def explain(pg_url: str, schema: str, captured: dict[str, tuple[str, Any]]) -> dict[str, str]:
    conn = await asyncpg.connect(pg_url, server_settings={"search_path": schema})
    plans: dict[str, str] = {}
    try:
        for name, (sql, params) in captured.items():
            rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *params)
            plans[f"{name} (custom plan)"] = "\n".join(r[0] for r in rows)
            # What a long-lived prepared statement ends up with: the generic plan.
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            stmt = await conn.prepare(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
            rows = await stmt.fetch(*params)
            plans[f"{name} (generic plan)"] = "\n".join(r[0] for r in rows)
            await conn.execute("RESET plan_cache_mode")
    finally:
        await conn.close()
    return plans


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=1_000)
    parser.add_argument("--iterations", type=int, default=2_000)
    parser.add_argument("--keep", action="store_true", help="keep the schema afterwards")
    parser.add_argument(
        "--reuse",
        metavar="PREFIX",
        help="use the schema <PREFIX>history and keep it: load only if it holds no messages "
        "yet (or a different count), so repeated runs skip the load",
    )
    args = parser.parse_args()
    pg_url = os.environ.get("AGENTMESH_BENCH_PG_URL")
    if not pg_url:
        raise SystemExit("set AGENTMESH_BENCH_PG_URL=postgresql://user@host:port/db")

    prefix = args.reuse or f"bench{uuid.uuid4().hex[:8]}_"
    keep = args.keep or bool(args.reuse)
    settings = Settings(database_url=pg_url, db_schema_prefix=prefix)
    schema = settings.schema_for("history")
    engine = db.create_engine(settings, "history")
    result: dict[str, Any] = {
        "messages": args.messages,
        "threads": args.threads,
        "iterations": args.iterations,
        "started": datetime.now(UTC).isoformat(),
        "event_loop": type(asyncio.get_running_loop()).__module__,
        "timing": {
            "service_side": "the servicer coroutine awaited directly in a loop (SQL round "
            "trips and response building included, gRPC transport excluded)",
            "grpc_round_trip": "tight loop of unary calls to a real grpc.aio server on "
            "127.0.0.1, client in the same process",
        },
    }
    try:
        if args.reuse and await _loaded(pg_url, schema) == (args.messages, args.threads):
            print(f"reusing {schema}: {args.messages} messages / {args.threads} threads")
            await db.migrate(engine, MIGRATIONS, schema)  # migrations added since its load
            result["load"] = {"reused_schema": schema}
        else:
            if args.reuse:
                conn = await asyncpg.connect(pg_url)
                try:
                    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                finally:
                    await conn.close()
            await db.migrate(engine, MIGRATIONS, schema)
            print(f"loading {args.messages} messages / {args.threads} threads into {schema} ...")
            result["load"] = await load(pg_url, schema, args.messages, args.threads)
            print("loaded:", result["load"])
        result["load_average_before"] = os.getloadavg()

        captured: dict[str, tuple[str, Any]] = {}
        last: list[tuple[str, Any]] = []

        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def _capture(_c: Any, _cur: Any, sql: str, params: Any, _ctx: Any, _many: bool) -> None:
            last.append((sql, params))

        servicer = HistoryServicer(engine)
        rnd = random.Random(1)
        chat = [t for t in range(args.threads) if t % 10 not in (0, 9)]
        big = [t for t in range(args.threads) if t % 10 == 0]

        def owner(t: int) -> str:
            return f"owner{t // OWNERS_PER:05d}"

        def history_req() -> tuple[pb.ListHistoryRequest, str]:
            t = rnd.choice(chat)
            return pb.ListHistoryRequest(thread_id=f"th{t:06d}", page_size=50), owner(t)

        def context_req() -> tuple[pb.LoadContextRequest, str]:
            t = rnd.choice(big)
            return pb.LoadContextRequest(thread_id=f"th{t:06d}", page_size=BIG), owner(t)

        # Check what the calls return before timing them.
        req, who = context_req()
        # _Context stands in for the servicer context: the owner metadata is all it reads.
        got = await servicer.LoadContext(req, _Context(who))  # type: ignore[arg-type]
        assert len(got.messages) == BIG, len(got.messages)
        req, who = history_req()
        # _Context stands in for the servicer context (as above).
        got_h = await servicer.ListHistory(req, _Context(who))  # type: ignore[arg-type]
        assert len(got_h.messages) == 50 and got_h.next_page_token

        async def direct_history() -> None:
            r, w = history_req()
            # _Context stands in for the servicer context (as above).
            await servicer.ListHistory(r, _Context(w))  # type: ignore[arg-type]

        async def direct_context() -> None:
            r, w = context_req()
            # _Context stands in for the servicer context (as above).
            await servicer.LoadContext(r, _Context(w))  # type: ignore[arg-type]

        n, warm = args.iterations, min(200, args.iterations)
        last.clear()
        result["service_side"] = {
            "ListHistory page 50": await _timed(direct_history, n, warm),
            "LoadContext 200-message thread": await _timed(direct_context, n, warm),
        }
        print("service-side:", json.dumps(result["service_side"], indent=1))

        # The statements the servicer sent, for EXPLAIN: through SQLAlchemy (the listener
        # above) or, for the pre-built ones, on asyncpg directly (services.history.pgdirect).
        direct_fetch = asyncpg.connection.Connection.fetch

        async def capturing_fetch(self: Any, query: str, *params: Any, **kw: Any) -> Any:
            last.append((query, params))
            return await direct_fetch(self, query, *params, **kw)

        # Patched for the measurement, restored below.
        asyncpg.connection.Connection.fetch = capturing_fetch  # type: ignore[method-assign]
        try:
            last.clear()
            await direct_history()
            captured["ListHistory page 50"] = next(x for x in last if "visibility_mask & 1" in x[0])
            last.clear()
            await direct_context()
            captured["LoadContext 200-message thread"] = next(
                x for x in last if "visibility_mask & 2" in x[0]
            )
        finally:
            # Restores the method patched above.
            asyncpg.connection.Connection.fetch = direct_fetch  # type: ignore[method-assign]

        def register(server: grpc.aio.Server) -> None:
            pb_grpc.add_HistoryServiceServicer_to_server(servicer, server)

        server = GrpcServer("history", ServiceParts(register, [SERVICE_NAME]), grace_seconds=1)
        port = await server.start("127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = pb_grpc.HistoryServiceStub(ch)

                async def rpc_history() -> None:
                    r, w = history_req()
                    await stub.ListHistory(r, metadata=call_metadata(w))

                async def rpc_context() -> None:
                    r, w = context_req()
                    await stub.LoadContext(r, metadata=call_metadata(w))

                result["grpc_round_trip"] = {
                    "ListHistory page 50": await _timed(rpc_history, n, warm),
                    "LoadContext 200-message thread": await _timed(rpc_context, n, warm),
                }
        finally:
            await server.stop()
        result["load_average_after"] = os.getloadavg()
        print("gRPC round trip:", json.dumps(result["grpc_round_trip"], indent=1))

        plans = await explain(pg_url, schema, captured)
        result["statements"] = {k: v[0] for k, v in captured.items()}
        result["plans"] = plans
        for name, plan in plans.items():
            print(f"\n=== {name}\n{plan}")
        result["seq_scan_in_plans"] = any("Seq Scan" in p for p in plans.values())
    finally:
        await engine.dispose()
        if not keep:
            conn = await asyncpg.connect(pg_url)
            try:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            finally:
                await conn.close()
            result["schema_dropped"] = True

    out = ROOT / "results" / f"history-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    try:
        # The services run on uvloop (shared.server.run_main); measure on the same loop.
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
