"""The project's own MCP server for the tests: owner-scoped notes, plus tools that are slow,
fail, or answer too much. Run over stdio or streamable HTTP:

    python -m tests.tools.notes_mcp_server stdio
    python -m tests.tools.notes_mcp_server http <port>

The owner comes as the `owner_id` argument (the executor fills it; the model never sees
it): each owner sees only their own notes.
"""

from __future__ import annotations

import asyncio
import sys
from collections import defaultdict

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("notes")
_notes: dict[str, list[str]] = defaultdict(list)


@server.tool()
def add_note(owner_id: str, text: str) -> str:
    """Keep a note for the user."""
    _notes[owner_id].append(text)
    return f"saved note {len(_notes[owner_id])}"


@server.tool()
def list_notes(owner_id: str) -> str:
    """The user's notes, one a line."""
    return "\n".join(_notes[owner_id]) or "no notes"


@server.tool()
def whoami(ctx: Context) -> str:
    """The owner the request's `_meta` names (an executor configured with owner.via meta)."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("agentmesh/owner", "nobody"))


@server.tool()
async def slow(seconds: float) -> str:
    """Answers after `seconds`."""
    await asyncio.sleep(seconds)
    return "finally"


@server.tool()
def fail(why: str) -> str:
    """Always reports an error."""
    raise ToolError(f"failed on purpose: {why}")


@server.tool()
def big(size: int) -> str:
    """A result of `size` characters."""
    return "x" * size


@server.tool()
def crash() -> str:
    """Ends the server process (a server that dies mid-call)."""
    sys.stdout.flush()
    import os

    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
