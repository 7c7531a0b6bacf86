"""The memory_write tool tells the model what the memory service made of a fact: saved,
already known (merged into the memory of the same fact), the memories it replaced
(contradicted) and the similar ones left (the real memory service)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.executor.memory_tools import MemoryClient, MemoryWrite
from services.executor.tools import ToolContext
from services.memory.service import build
from shared.settings import Settings
from tests.grpc_helpers import running_service


@pytest.fixture
async def tool(settings: Settings) -> AsyncIterator[MemoryWrite]:
    async with running_service("memory", build, settings) as address:
        client = MemoryClient(address, 5.0)
        try:
            yield MemoryWrite(client)
        finally:
            await client.aclose()


async def test_the_tool_says_saved_known_replaced_and_similar(tool: MemoryWrite) -> None:
    context = ToolContext("alice", "job-1", "t1", "UTC")

    async def write(content: str) -> list[str]:
        return (await tool.execute({"content": content}, context)).splitlines()

    [saved] = await write("User lives in Shanghai")
    assert saved.startswith("saved memory ") and saved.endswith(": User lives in Shanghai")
    shanghai = saved.removeprefix("saved memory ").split(":")[0]
    [known] = await write("The user lives in Shanghai.")
    assert known == f"already known as memory {shanghai}: User lives in Shanghai"
    moved, replaced = await write("User lives in Hangzhou")
    assert moved.startswith("saved memory ")
    assert replaced == f"replaced memory {shanghai} (contradicted): User lives in Shanghai"
    await write("User drinks green tea every morning")
    tea, similar = await write("User drinks green tea")
    assert tea.startswith("saved memory ")
    assert similar.startswith("similar memory ") and similar.endswith("every morning")
