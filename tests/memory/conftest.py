"""A real memory service (grpc.aio on port 0) on the test's backend, and a client per owner."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from agentmesh.memory.v1 import memory_service_pb2 as pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as pb_grpc

from services.memory.service import build
from shared.errors import DomainError, from_rpc_error
from shared.settings import Settings
from tests.grpc_helpers import channel, owner_md, running_service


@dataclass
class Client:
    """MemoryService calls as one owner."""

    stub: pb_grpc.MemoryServiceStub
    owner: str

    def _md(self) -> tuple[tuple[str, str], ...]:
        return owner_md(self.owner)

    async def write(self, content: str, **fields: Any) -> pb.WriteMemoryResponse:
        request = pb.WriteMemoryRequest(content=content, **fields)
        return await self.stub.WriteMemory(request, metadata=self._md())

    async def forget_id(self, memory_id: str) -> list[str]:
        response = await self.stub.ForgetMemory(
            pb.ForgetMemoryRequest(id=memory_id), metadata=self._md()
        )
        return list(response.forgotten_ids)

    async def forget_query(self, query: str) -> list[str]:
        response = await self.stub.ForgetMemory(
            pb.ForgetMemoryRequest(content_query=query), metadata=self._md()
        )
        return list(response.forgotten_ids)

    async def search(self, query: str, page_size: int = 0) -> list[pb.Memory]:
        response = await self.stub.SearchMemories(
            pb.SearchMemoriesRequest(query=query, page_size=page_size), metadata=self._md()
        )
        return list(response.memories)

    async def search_response(self, query: str, page_size: int = 0) -> pb.SearchMemoriesResponse:
        return await self.stub.SearchMemories(
            pb.SearchMemoriesRequest(query=query, page_size=page_size), metadata=self._md()
        )

    async def list(self, page_size: int = 0, page_token: str = "") -> pb.ListMemoriesResponse:
        return await self.stub.ListMemories(
            pb.ListMemoriesRequest(page_size=page_size, page_token=page_token),
            metadata=self._md(),
        )

    async def list_all(self, page_size: int = 100) -> list[pb.Memory]:
        out: list[pb.Memory] = []
        token = ""
        while True:
            page = await self.list(page_size, token)
            out.extend(page.memories)
            token = page.next_page_token
            if not token:
                return out

    async def get(self, memory_id: str) -> pb.Memory:
        response = await self.stub.GetMemory(pb.GetMemoryRequest(id=memory_id), metadata=self._md())
        return response.memory

    async def watermark(self, name: str = "") -> pb.Watermark:
        response = await self.stub.GetWatermark(
            pb.GetWatermarkRequest(name=name), metadata=self._md()
        )
        return response.watermark

    async def advance(self, expected: str, position: str, **fields: Any) -> pb.Watermark:
        response = await self.stub.AdvanceWatermark(
            pb.AdvanceWatermarkRequest(expected_position=expected, position=position, **fields),
            metadata=self._md(),
        )
        return response.watermark


@pytest.fixture
async def stub(settings: Settings) -> AsyncIterator[pb_grpc.MemoryServiceStub]:
    async with running_service("memory", build, settings) as address, channel(address) as ch:
        yield pb_grpc.MemoryServiceStub(ch)


@pytest.fixture
def client(stub: pb_grpc.MemoryServiceStub) -> Callable[[str], Client]:
    return lambda owner: Client(stub, owner)


async def rpc_error(call: Awaitable[Any]) -> DomainError:
    """The DomainError a call failed with (fails the test if the call succeeded)."""
    try:
        await call
    except grpc.aio.AioRpcError as err:
        return from_rpc_error(err)
    raise AssertionError("the call succeeded")
