"""MemoryService over gRPC: owner from metadata, request -> core -> store -> response.

Each call is one transaction. The owner always comes from the call's identity, never
from a request field.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime
from typing import Any

import grpc
from agentmesh.memory.v1 import memory_service_pb2 as pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as pb_grpc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.memory import (
    consolidation,
    conversation,
    conversation_store,
    convert,
    core,
    store,
    tables,
)
from services.memory.conversation_tasks import ConversationEmbedder
from services.memory.embeddings import (
    NO_EMBEDDING_MODEL,
    Embedder,
    EmbeddingConfig,
    QueryVector,
)
from services.memory.owner_data import REGISTRY
from shared import metrics, outbox, owner_data, pagination
from shared.errors import InvalidArgument
from shared.identity import owner_id
from shared.settings import Settings

log = logging.getLogger(__name__)


def _searched(found: list[core.Memory], vector: QueryVector) -> pb.SearchMemoriesResponse:
    """The answer of a search, saying how it ran (and counted so, by mode and reason)."""
    mode = "lexical" if vector.lexical_reason else "hybrid"
    metrics.memory_searched(mode, vector.lexical_reason)
    return pb.SearchMemoriesResponse(
        memories=[convert.memory_to_pb(m) for m in found],
        mode=pb.SEARCH_MODE_LEXICAL if vector.lexical_reason else pb.SEARCH_MODE_HYBRID,
        mode_reason=vector.lexical_reason,
    )


@dataclasses.dataclass(frozen=True)
class Written:
    """What a WriteMemory did: the memory holding the fact, and what consolidation did."""

    memory: core.Memory
    created: bool
    merged: bool
    superseded: list[core.Memory]
    similar: list[core.Memory]


async def write_fact(
    conn: AsyncConnection, owner: str, fact: core.MemoryWrite, actor: str, now: datetime
) -> Written:
    """WriteMemory's unit of work: the fact written, merged into the memory that says it in
    other words, or superseding the memories it contradicts (consolidation.on_write, over
    the memories sharing its words: no embedding on the write's path); its change records."""
    others = await store.related(conn, owner, consolidation.candidate_groups(fact.content))
    # The same fact written again is a rewrite of its memory, as ever.
    same = any(m.content_key == fact.content_key for m in others)
    outcome = consolidation.WriteOutcome() if same else consolidation.on_write(fact.content, others)
    if outcome.merged_into is not None:
        memory = await store.add_sources(conn, owner, outcome.merged_into, fact.source_message_ids)
        await store.record_changes(
            conn, owner, [consolidation.write_merge_change(memory, fact, actor)], now
        )
        return Written(memory, False, True, [], outcome.similar)
    memory, created = await store.write(conn, owner, fact, now)
    superseded = await store.remove(conn, owner, [m.id for m in outcome.superseded])
    records = [core.write_change(memory, created, fact, actor)]
    records += [consolidation.supersede_change(memory, m, actor) for m in superseded]
    await store.record_changes(conn, owner, records, now)
    return Written(memory, created, False, superseded, outcome.similar)


async def consolidate_owner(
    conn: AsyncConnection,
    owner: str,
    actor: str,
    now: datetime,
    config: EmbeddingConfig | None,
) -> tuple[consolidation.Plan, list[core.Change]]:
    """ConsolidateMemories' unit of work over all of the owner's memories (with `config`,
    their current vectors by its model too): the plan carried out and recorded."""
    memories = await store.every_memory(conn, owner)
    near = None
    if config is not None:
        near = await store.near_pairs(
            conn, owner, config.model, config.dimensions, consolidation.DUPLICATE_COSINE
        )
    plan = consolidation.plan(memories, near)
    records = consolidation.plan_changes(plan, actor)
    for kept, merged in plan.merges:
        await store.add_sources(
            conn, owner, kept, [s for m in merged for s in m.source_message_ids]
        )
    await store.remove(conn, owner, [m.id for m in plan.removed])
    await store.record_changes(conn, owner, records, now)
    return plan, records


class MemoryServicer(pb_grpc.MemoryServiceServicer):
    def __init__(
        self,
        engine: AsyncEngine,
        tokens: pagination.PageTokens | None = None,
        embedder: Embedder | None = None,
        conversation_embedder: ConversationEmbedder | None = None,
    ) -> None:
        self.engine = engine
        self.tokens = tokens or pagination.PageTokens(Settings().page_token_secret)
        # With an embedding model: the background embedder (woken by writes) and its client
        # (embeds queries). None: search is lexical only.
        self.embedder = embedder
        self.conversation_embedder = conversation_embedder

    async def WriteMemory(
        self, request: pb.WriteMemoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.WriteMemoryResponse:
        owner = owner_id(context)
        fact = core.validate_write(
            request.content, request.kind, request.source_run_id, request.source_message_ids
        )
        actor = core.validate_actor(request.actor)
        async with self.engine.begin() as conn:
            written = await write_fact(conn, owner, fact, actor, store.utc_now())
        if self.embedder is not None and not written.merged:
            self.embedder.wake()
        return pb.WriteMemoryResponse(
            memory=convert.memory_to_pb(written.memory),
            created=written.created,
            merged=written.merged,
            superseded_memories=[convert.memory_to_pb(m) for m in written.superseded],
            similar_memories=[convert.memory_to_pb(m) for m in written.similar],
        )

    async def ConsolidateMemories(
        self, request: pb.ConsolidateMemoriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ConsolidateMemoriesResponse:
        owner = owner_id(context)
        actor = core.validate_actor(request.actor)
        config = None if self.embedder is None else self.embedder.client.config
        async with self.engine.begin() as conn:
            now = store.utc_now()
            plan, records = await consolidate_owner(conn, owner, actor, now, config)
        return pb.ConsolidateMemoriesResponse(
            merged_count=sum(len(merged) for _, merged in plan.merges),
            superseded_count=sum(len(older) for _, older in plan.supersessions),
            changes=[
                convert.change_to_pb(dataclasses.replace(c, create_time=now)) for c in records
            ],
        )

    async def ForgetMemory(
        self, request: pb.ForgetMemoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ForgetMemoryResponse:
        owner = owner_id(context)
        target = request.WhichOneof("target")
        if target == "id":
            memory_id = core.validate_id("id", request.id)
        elif target == "content_query":
            query = core.validate_query("content_query", request.content_query)
        else:
            raise InvalidArgument("target", "set id or content_query")
        reason = core.validate_reason(request.reason)
        sources = core.validate_sources(request.source_run_id, request.source_message_ids)
        actor = core.validate_actor(request.actor)
        async with self.engine.begin() as conn:
            if target == "id":
                forgotten = await store.forget_by_id(conn, owner, memory_id)
            else:
                forgotten = await store.forget_matching(conn, owner, query)
            records = core.forget_changes(forgotten, actor, reason, request.source_run_id, sources)
            await store.record_changes(conn, owner, records, store.utc_now())
        return pb.ForgetMemoryResponse(
            forgotten_ids=[m.id for m in forgotten],
            memories=[convert.memory_to_pb(m) for m in forgotten],
        )

    async def UpdateMemory(
        self, request: pb.UpdateMemoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.UpdateMemoryResponse:
        owner = owner_id(context)
        edit = core.validate_edit(
            request.id, request.content, request.kind, request.expected_version
        )
        actor = core.validate_actor(request.actor)
        async with self.engine.begin() as conn:
            now = store.utc_now()
            before, after = await store.update(conn, owner, edit, now)
            await store.record_changes(conn, owner, [core.update_change(before, after, actor)], now)
        if self.embedder is not None:
            self.embedder.wake()
        return pb.UpdateMemoryResponse(memory=convert.memory_to_pb(after))

    async def ListMemoryChanges(
        self, request: pb.ListMemoryChangesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListMemoryChangesResponse:
        owner = owner_id(context)
        limit = pagination.page_size(request.page_size)
        scope = {"rpc": "ListMemoryChanges", "owner": owner}
        position = self.tokens.decode(request.page_token, scope)
        after = None if position is None else pagination.position_int(position)
        async with self.engine.connect() as conn:
            page = await store.list_changes(conn, owner, after, limit + 1)
        more = len(page) > limit
        page = page[:limit]
        token = self.tokens.encode(page[-1][0], scope) if more else ""
        return pb.ListMemoryChangesResponse(
            changes=[convert.change_to_pb(c) for _, c in page], next_page_token=token
        )

    async def DeleteOwnerData(
        self, request: pb.DeleteOwnerDataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteOwnerDataResponse:
        """Deprecated twin of agentmesh.platform.v1's, over the same registry."""
        counts = await owner_data.delete_owner(self.engine, REGISTRY, owner_id(context))
        return pb.DeleteOwnerDataResponse(deleted_counts=counts)

    # --- webhook outbox (shared/outbox.py; the gateway's deliverer, admin scope) ----------

    async def ListWebhookEvents(
        self,
        request: pb.ListWebhookEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.ListWebhookEventsResponse:
        events = await outbox.serve_list(
            context, self.engine.connect(), tables.webhook_outbox, request.page_size
        )
        return pb.ListWebhookEventsResponse(events=events)

    async def AcknowledgeWebhookEvents(
        self,
        request: pb.AcknowledgeWebhookEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.AcknowledgeWebhookEventsResponse:
        count = await outbox.serve_acknowledge(
            context, self.engine.begin(), tables.webhook_outbox, request.event_ids
        )
        return pb.AcknowledgeWebhookEventsResponse(acknowledged_count=count)

    async def SearchMemories(
        self, request: pb.SearchMemoriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.SearchMemoriesResponse:
        owner = owner_id(context)
        query = core.validate_query("query", request.query)
        # The page size rule of every listing (docs/protocols/agent/api-endpoints.md).
        limit = pagination.page_size(request.page_size)
        if self.embedder is None:
            vector = QueryVector(None, "", NO_EMBEDDING_MODEL)
        else:
            # Nothing to recall is answered before the query is embedded (a model call),
            # as hybrid search would answer it.
            async with self.engine.connect() as conn:
                if not await store.has_memories(conn, owner):
                    return _searched([], QueryVector(None, ""))
            # Late or failed: this search is lexical (and says so), the next asks again.
            vector = await self.embedder.client.embed_query(query)
        async with self.engine.connect() as conn:
            found = await store.search(
                conn, owner, query, limit, embedding=vector.vector, model=vector.model
            )
        return _searched(found, vector)

    async def ListMemories(
        self, request: pb.ListMemoriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListMemoriesResponse:
        owner = owner_id(context)
        # The page size rule of every listing (docs/protocols/agent/api-endpoints.md).
        limit = pagination.page_size(request.page_size)
        # The token is bound to the owner: another owner's token is rejected, not reused.
        scope = {"rpc": "ListMemories", "owner": owner}
        position = self.tokens.decode(request.page_token, scope)
        after = None if position is None else core.parse_page_position(position)
        async with self.engine.connect() as conn:
            page = await store.list_page(conn, owner, after, limit + 1)
        more = len(page) > limit
        page = page[:limit]
        token = self.tokens.encode(core.page_position(page[-1]), scope) if more else ""
        return pb.ListMemoriesResponse(
            memories=[convert.memory_to_pb(m) for m in page], next_page_token=token
        )

    async def GetMemory(
        self, request: pb.GetMemoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetMemoryResponse:
        owner = owner_id(context)
        memory_id = core.validate_id("id", request.id)
        async with self.engine.connect() as conn:
            memory = await store.get(conn, owner, memory_id)
        return pb.GetMemoryResponse(memory=convert.memory_to_pb(memory))

    async def GetWatermark(
        self, request: pb.GetWatermarkRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetWatermarkResponse:
        owner = owner_id(context)
        name = core.watermark_name(request.name)
        async with self.engine.connect() as conn:
            watermark = await store.get_watermark(conn, owner, name)
        return pb.GetWatermarkResponse(watermark=convert.watermark_to_pb(watermark))

    async def AdvanceWatermark(
        self, request: pb.AdvanceWatermarkRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AdvanceWatermarkResponse:
        owner = owner_id(context)
        name = core.watermark_name(request.name)
        expected = core.validate_position(
            "expected_position", request.expected_position, required=False
        )
        position = core.validate_position("position", request.position, required=True)
        time = convert.datetime_from(request.time, "time") if request.HasField("time") else None
        async with self.engine.begin() as conn:
            watermark = await store.advance_watermark(
                conn, owner, name, expected, position, time, store.utc_now()
            )
        return pb.AdvanceWatermarkResponse(watermark=convert.watermark_to_pb(watermark))

    # --- conversation recall (services/memory/conversation.py) ----------------------------

    async def IndexConversation(
        self, request: pb.IndexConversationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.IndexConversationResponse:
        owner = owner_id(context)
        conversation.check_batch_size(len(request.messages))
        messages = [
            convert.conversation_message_from_pb(m, f"messages[{i}]")
            for i, m in enumerate(request.messages)
        ]
        async with self.engine.begin() as conn:
            count = await conversation_store.index(conn, owner, messages, store.utc_now())
        if count and self.conversation_embedder is not None:
            self.conversation_embedder.wake()
        return pb.IndexConversationResponse(indexed_count=count)

    async def SearchConversation(
        self, request: pb.SearchConversationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.SearchConversationResponse:
        owner = owner_id(context)
        query = core.validate_query("query", request.query)
        limit = pagination.page_size(request.page_size)
        exclude = conversation.validate_excluded(request.exclude_message_ids)
        vector = QueryVector(None, "", NO_EMBEDDING_MODEL)
        if self.embedder is not None and self.conversation_embedder is not None:
            # Nothing to recall is answered before the query is embedded (a model call).
            async with self.engine.connect() as conn:
                if not await conversation_store.has_messages(conn, owner):
                    return pb.SearchConversationResponse()
            # Late or failed: this search is lexical, the next asks again (as SearchMemories).
            vector = await self.embedder.client.embed_query(query)
        async with self.engine.connect() as conn:
            found = await conversation_store.search(
                conn, owner, query, limit, exclude, embedding=vector.vector, model=vector.model
            )
        hits = [convert.conversation_hit_to_pb(m) for m in found]
        return pb.SearchConversationResponse(hits=hits)

    async def DeleteConversation(
        self, request: pb.DeleteConversationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteConversationResponse:
        owner = owner_id(context)
        if request.all_threads:
            if request.thread_id:
                raise InvalidArgument("thread_id", "must be empty with all_threads")
            async with self.engine.begin() as conn:
                count = await conversation_store.delete_owner(conn, owner)
            return pb.DeleteConversationResponse(deleted_count=count)
        thread_id = core.validate_id("thread_id", request.thread_id)
        async with self.engine.begin() as conn:
            count = await conversation_store.forget_thread(conn, owner, thread_id, store.utc_now())
        return pb.DeleteConversationResponse(deleted_count=count)
