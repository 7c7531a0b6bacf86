"""MemoryService over gRPC: owner from metadata, request -> core -> store -> response.

Each call is one transaction. The owner always comes from the call's identity, never
from a request field.
"""

from __future__ import annotations

import grpc
from sqlalchemy.ext.asyncio import AsyncEngine

from agentmesh.memory.v1 import memory_service_pb2 as pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as pb_grpc
from services.memory import convert, core, store
from shared import pagination
from shared.errors import InvalidArgument
from shared.identity import owner_id
from shared.settings import Settings


class MemoryServicer(pb_grpc.MemoryServiceServicer):
    def __init__(self, engine: AsyncEngine, tokens: pagination.PageTokens | None = None) -> None:
        self.engine = engine
        self.tokens = tokens or pagination.PageTokens(Settings().page_token_secret)

    async def WriteMemory(
        self, request: pb.WriteMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteMemoryResponse:
        owner = owner_id(context)
        fact = core.validate_write(
            request.content, request.kind, request.source_run_id, request.source_message_ids
        )
        async with self.engine.begin() as conn:
            memory, created = await store.write(conn, owner, fact, store.utc_now())
        return pb.WriteMemoryResponse(memory=convert.memory_to_pb(memory), created=created)

    async def ForgetMemory(
        self, request: pb.ForgetMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForgetMemoryResponse:
        owner = owner_id(context)
        target = request.WhichOneof("target")
        if target == "id":
            memory_id = core.validate_id("id", request.id)
            async with self.engine.begin() as conn:
                ids = await store.forget_by_id(conn, owner, memory_id)
        elif target == "content_query":
            query = core.validate_query("content_query", request.content_query)
            async with self.engine.begin() as conn:
                ids = await store.forget_matching(conn, owner, query)
        else:
            raise InvalidArgument("target", "set id or content_query")
        return pb.ForgetMemoryResponse(forgotten_ids=ids)

    async def DeleteOwnerData(
        self, request: pb.DeleteOwnerDataRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteOwnerDataResponse:
        owner = owner_id(context)
        async with self.engine.begin() as conn:
            counts = await store.delete_owner_data(conn, owner)
        return pb.DeleteOwnerDataResponse(deleted_counts=counts)

    async def SearchMemories(
        self, request: pb.SearchMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchMemoriesResponse:
        owner = owner_id(context)
        query = core.validate_query("query", request.query)
        # The page size rule of every listing (docs/protocols/agent/api-endpoints.md).
        limit = pagination.page_size(request.page_size)
        async with self.engine.connect() as conn:
            found = await store.search(conn, owner, query, limit)
        return pb.SearchMemoriesResponse(memories=[convert.memory_to_pb(m) for m in found])

    async def ListMemories(
        self, request: pb.ListMemoriesRequest, context: grpc.aio.ServicerContext
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
        self, request: pb.GetMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMemoryResponse:
        owner = owner_id(context)
        memory_id = core.validate_id("id", request.id)
        async with self.engine.connect() as conn:
            memory = await store.get(conn, owner, memory_id)
        return pb.GetMemoryResponse(memory=convert.memory_to_pb(memory))

    async def GetWatermark(
        self, request: pb.GetWatermarkRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetWatermarkResponse:
        owner = owner_id(context)
        name = core.watermark_name(request.name)
        async with self.engine.connect() as conn:
            watermark = await store.get_watermark(conn, owner, name)
        return pb.GetWatermarkResponse(watermark=convert.watermark_to_pb(watermark))

    async def AdvanceWatermark(
        self, request: pb.AdvanceWatermarkRequest, context: grpc.aio.ServicerContext
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
