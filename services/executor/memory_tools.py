"""The memory tools (memory_write, memory_forget, memory_search, conversation_search) and
the memory service client behind them and the memory agent.

Every call carries the RUN's owner (ToolContext.owner) in its metadata: the memory service
scopes everything by it, and no tool argument can name another owner (unknown arguments,
"owner" among them, are refused).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import grpc
from agentmesh.memory.v1 import memory_service_pb2 as pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as pb_grpc
from pydantic import BaseModel, ConfigDict, ValidationError

from services.executor.core import stating_messages
from services.executor.recall import MAX_EXCERPT_CHARS
from services.executor.tools import ToolContext, ToolError
from services.memory.core import content_key
from shared.clients import open_channel
from shared.errors import Aborted, from_rpc_error
from shared.identity import call_metadata
from shared.logs import request_id_var
from shared.text import storable

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")

MEMORY_KINDS = ("fact", "preference", "dislike", "name", "place")
WATERMARK = "memory_agent"
# The memory service's bound of a forget's reason.
MAX_REASON_CHARS = 500


@dataclass(frozen=True)
class Watermark:
    position: str  # "" = never advanced


class MemoryClient:
    """The memory service, called on behalf of one owner per call."""

    def __init__(self, address: str, rpc_timeout_seconds: float) -> None:
        self._channel = open_channel(address, peer="memory")
        self._stub = pb_grpc.MemoryServiceStub(self._channel)
        self._timeout = rpc_timeout_seconds

    async def _call(
        self,
        method: grpc.aio.UnaryUnaryMultiCallable[_Request, _Response],
        request: _Request,
        owner: str,
    ) -> _Response:
        try:
            return await method(
                request,
                timeout=self._timeout,
                metadata=call_metadata(owner, request_id=request_id_var.get() or None),
            )
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from None

    async def write(
        self, owner: str, content: str, kind: str, run_id: str, message_ids: Sequence[str]
    ) -> pb.WriteMemoryResponse:
        request = pb.WriteMemoryRequest(
            content=content, kind=kind, source_run_id=run_id, source_message_ids=list(message_ids)
        )
        return await self._call(self._stub.WriteMemory, request, owner)

    async def forget(
        self,
        owner: str,
        *,
        memory_id: str = "",
        content_query: str = "",
        reason: str = "",
        run_id: str = "",
        message_ids: Sequence[str] = (),
    ) -> list[pb.Memory]:
        """The memories forgotten, as they were; the memory service records the forget with
        its reason and the run and messages that asked for it."""
        request = pb.ForgetMemoryRequest(
            reason=reason, source_run_id=run_id, source_message_ids=list(message_ids)
        )
        if memory_id:
            request.id = memory_id
        else:
            request.content_query = content_query
        response = await self._call(self._stub.ForgetMemory, request, owner)
        return list(response.memories)

    async def search(self, owner: str, query: str, page_size: int = 10) -> list[pb.Memory]:
        return list((await self.search_response(owner, query, page_size)).memories)

    async def search_response(
        self, owner: str, query: str, page_size: int = 10
    ) -> pb.SearchMemoriesResponse:
        """The memories found, and how the search ran (mode, mode_reason)."""
        request = pb.SearchMemoriesRequest(query=query, page_size=page_size)
        return await self._call(self._stub.SearchMemories, request, owner)

    async def search_conversation(
        self, owner: str, query: str, page_size: int = 10, exclude: Sequence[str] = ()
    ) -> list[pb.ConversationHit]:
        """The owner's past chat messages best matching `query` (conversation recall)."""
        request = pb.SearchConversationRequest(
            query=query, page_size=page_size, exclude_message_ids=list(exclude)
        )
        response = await self._call(self._stub.SearchConversation, request, owner)
        return list(response.hits)

    async def watermark(self, owner: str, name: str = WATERMARK) -> Watermark:
        request = pb.GetWatermarkRequest(name=name)
        response = await self._call(self._stub.GetWatermark, request, owner)
        return Watermark(response.watermark.position)

    async def advance(
        self, owner: str, name: str, expected: str, position: str, time: datetime
    ) -> bool:
        """Compare-and-set; False when another run moved the watermark first (ABORTED)."""
        request = pb.AdvanceWatermarkRequest(
            name=name, expected_position=expected, position=position
        )
        request.time.FromDatetime(time)
        try:
            await self._call(self._stub.AdvanceWatermark, request, owner)
        except Aborted:
            return False
        return True

    async def aclose(self) -> None:
        await self._channel.close()


def _arguments(arguments: Mapping[str, Any], allowed: Sequence[str]) -> dict[str, str]:
    unknown = sorted(set(arguments) - set(allowed))
    if unknown:
        raise ToolError(f"unknown arguments: {', '.join(unknown)} (allowed: {', '.join(allowed)})")
    out = {}
    for name, value in arguments.items():
        if not isinstance(value, str):
            raise ToolError(f"{name} must be a string")
        out[name] = value.strip()
    return out


class MemoryWrite:
    name = "memory_write"
    description = "Save one durable fact about the user (idempotent: the same fact is one memory)."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "content": {"type": "string", "description": "The fact, short, in the user's language"},
            "kind": {"type": "string", "enum": list(MEMORY_KINDS)},
        },
        "required": ["content"],
        "additionalProperties": False,
    }

    def __init__(self, client: MemoryClient) -> None:
        self.client = client

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        args = _arguments(arguments, ("content", "kind"))
        if not args.get("content"):
            raise ToolError("content is required")
        if args.get("kind", "") not in ("", *MEMORY_KINDS):
            raise ToolError(f"kind must be one of {', '.join(MEMORY_KINDS)}")
        sources = stating_messages(
            args["content"], context.source_message_ids, context.source_texts
        )
        response = await self.client.write(
            context.owner, args["content"], args.get("kind", ""), context.run_id, sources
        )
        memory = response.memory
        if response.merged:
            # The same fact in other words: the model learns it was known already.
            lines = [f"already known as memory {memory.id}: {memory.content}"]
        else:
            verb = "saved" if response.created else "updated"
            lines = [f"{verb} memory {memory.id}: {memory.content}"]
        lines += [
            f"replaced memory {m.id} (contradicted): {m.content}"
            for m in response.superseded_memories
        ]
        lines += [f"similar memory {m.id}: {m.content}" for m in response.similar_memories]
        return "\n".join(lines)


class MemoryForget:
    name = "memory_forget"
    description = "Forget the user's memories matching content_query, or the one with id."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "content_query": {"type": "string", "description": "What the memory says"},
            "id": {"type": "string", "description": "A memory id"},
            "reason": {"type": "string", "description": "Why, e.g. what the user asked"},
        },
        "additionalProperties": False,
    }

    def __init__(self, client: MemoryClient) -> None:
        self.client = client

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        args = _arguments(arguments, ("content_query", "id", "reason"))
        query, memory_id = args.get("content_query", ""), args.get("id", "")
        if bool(query) == bool(memory_id):
            raise ToolError("give exactly one of content_query or id")
        # The messages that asked for it: those that state what is to be forgotten.
        sources = stating_messages(
            query or memory_id, context.source_message_ids, context.source_texts, newest=True
        )
        forgotten = await self.client.forget(
            context.owner,
            memory_id=memory_id,
            content_query=query,
            # A model's NUL or lone surrogate must not cost the forget (shared.text).
            reason=storable(args.get("reason") or _asked(sources, context))[:MAX_REASON_CHARS],
            run_id=context.run_id,
            message_ids=sources,
        )
        noun = "memory" if len(forgotten) == 1 else "memories"
        cited = "".join(f"; {m.id}: {m.content}" for m in forgotten)
        return f"forgot {len(forgotten)} {noun}{cited}"


_FORGOT = re.compile(r"^forgot (\d+) memor(?:y|ies)\b")


def forgotten_count(result: str) -> int:
    """How many memories a memory_forget result (MemoryForget.execute's text) says were
    forgotten: a forget that matched nothing ran well and forgot 0."""
    match = _FORGOT.match(result)
    return int(match.group(1)) if match else 0


class MemorySearch:
    name = "memory_search"
    description = "Search the user's memories by words."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, client: MemoryClient) -> None:
        self.client = client

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        args = _arguments(arguments, ("query",))
        if not args.get("query"):
            raise ToolError("query is required")
        found = await self.client.search(context.owner, args["query"])
        return json.dumps(
            [{"id": m.id, "content": m.content, "kind": m.kind} for m in found], ensure_ascii=False
        )


class ConversationSearch:
    name = "conversation_search"
    description = (
        "Search what the user and you said in the user's earlier conversations (other "
        "threads too), by words; for what was said but never saved as a memory."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, client: MemoryClient) -> None:
        self.client = client

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        args = _arguments(arguments, ("query",))
        if not args.get("query"):
            raise ToolError("query is required")
        hits = await self.client.search_conversation(context.owner, args["query"])
        return json.dumps([_said(h) for h in hits], ensure_ascii=False)


def _said(hit: pb.ConversationHit) -> dict[str, str]:
    m = hit.message
    return {
        "threadId": m.thread_id,
        "role": m.role,
        "date": m.create_time.ToDatetime(tzinfo=UTC).date().isoformat(),
        "text": m.text[:MAX_EXCERPT_CHARS],
    }


def _asked(sources: Sequence[str], context: ToolContext) -> str:
    """A forget's reason when the model gave none: the user's words that asked for it."""
    texts = dict(zip(context.source_message_ids, context.source_texts, strict=False))
    said = [texts[i] for i in sources if i in texts]
    return f"the user said: {' / '.join(said)}" if said else ""


def memory_tools(client: MemoryClient) -> tuple[MemoryWrite, MemoryForget, MemorySearch]:
    return MemoryWrite(client), MemoryForget(client), MemorySearch(client)


def builtin_tools(
    client: MemoryClient,
) -> tuple[MemoryWrite, MemoryForget, MemorySearch, ConversationSearch]:
    """Every built-in tool (shared.tools.REGISTERED_TOOLS): the memory tools and
    conversation_search."""
    return (*memory_tools(client), ConversationSearch(client))


# ---- structured extraction (a card's memory_extraction: structured) ----------------------

# The one JSON document a model that does not call tools answers instead: the memories to
# save (memory_write's arguments) and the memories to forget, each with what it says
# (memory_forget's content_query) and the user's request to forget it, quoted. Every
# property required and no others, as OpenAI's strict mode wants; no $ref, so llama.cpp's
# schema-to-grammar takes it as it is.
EXTRACTION_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "memories": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "kind": {"type": "string", "enum": list(MEMORY_KINDS)},
                },
                "required": ["content", "kind"],
                "additionalProperties": False,
            },
        },
        "forget": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "memory": {"type": "string"},
                    "user_request": {"type": "string"},
                },
                "required": ["memory", "user_request"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["memories", "forget"],
    "additionalProperties": False,
}

# A memory is one short fact, a forget names one: a grammar-constrained answer (llama.cpp's
# schema-to-grammar takes maxLength and maxItems) ends each string and list there, so a
# small model that rambles inside a string still closes its document (seen: SmolLM2-135M
# writing prose into one memory until the output limit cut the document).
MAX_EXTRACTED_CHARS = 200
MAX_EXTRACTED_ITEMS = 8


def bounded(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with every free string at most MAX_EXTRACTED_CHARS long and every list at
    most MAX_EXTRACTED_ITEMS long."""
    out: dict[str, Any] = dict(schema)
    if out.get("type") == "string" and "enum" not in out:
        out["maxLength"] = MAX_EXTRACTED_CHARS
    if out.get("type") == "array":
        out["maxItems"] = MAX_EXTRACTED_ITEMS
        out["items"] = bounded(out["items"])
    if "properties" in out:
        out["properties"] = {k: bounded(v) for k, v in out["properties"].items()}
    return out


GRAMMAR_EXTRACTION_SCHEMA: Mapping[str, Any] = bounded(EXTRACTION_SCHEMA)


class ExtractedMemory(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    content: str
    kind: str


# A request to forget, per clause (split at punctuation and at "and", "so", "所以", ...): the
# verb at the clause's start (after fillers and the ways of asking), so "I always forget my
# keys", "I forgot my umbrella" and "don't forget that I like tea" are not requests;
# "remove"/"delete" only with what is remembered. Chinese in the same way: "我忘了带伞" and
# "请不要忘记" are not, "请忘记", "把…忘了", "别再记着…" are.
_CLAUSE_BREAK = re.compile(
    r"[.!?;,\n。！？；，、]+|\s+(?:and|but|so|also|then|plus)\s+|而且|并且|还有|但是|另外|所以|然后",
    re.IGNORECASE,
)
_EN_FORGET = re.compile(
    r"^(?:(?:ok(?:ay)?|so|and|but|also|now|then|hey|oh|well|actually)\b\W*)*"
    r"(?:(?:please|pls|kindly|just|can you|could you|would you|will you|you can|you could|"
    r"you should|you may|I want you to|I'd like you to|I would like you to|I need you to)\s+)*"
    r"(?:forget(?!-)|unlearn|stop remembering|no longer remember|(?:don'?t|do not) remember|"
    r"I (?:don'?t|do not|no longer) want you to (?:remember|keep|know)|"
    r"(?:delete|remove|erase|drop|clear|wipe)\b.*"
    r"\b(?:memor(?:y|ies)|what you (?:know|remember)|you (?:know|remember)))\b",
    re.IGNORECASE,
)
_ZH_FORGET = re.compile(
    r"^(?:那|好吧|好|就|还有|另外|而且)*"
    r"(?:请|麻烦|帮我|你|您|能不能|能否|可不可以|可以|就|我(?:想|希望|要)让?你)*"
    r"(?:把.+忘(?:记|掉|了)|忘(?:记|掉|了)|"
    r"(?:别|不要|不用|不必|无需|不需要|停止)再?(?:记|保存|存)|"
    r"(?:删除|删掉|删了|清除|清掉|去掉|移除|抹掉).*(?:记忆|记录))"
)


def asks_to_forget(text: str) -> bool:
    """Whether `text` (a user's words, English or Chinese) asks the assistant to forget
    something, rather than stating a fact or asking to remember one."""
    for clause in _CLAUSE_BREAK.split(text):
        # A typographic apostrophe ("don\u2019t") is the ASCII one; quote marks around it go.
        clause = clause.replace("\u2019", "'").strip(" \t\"'\u2018\u201c\u201d「」")
        if _EN_FORGET.search(clause) or _ZH_FORGET.search(clause):
            return True
    return False


class ForgetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    memory: str
    user_request: str

    def asked_in(self, said: Sequence[str]) -> bool:
        """The user really asked: the quoted request is in one of their messages (compared
        as the memory service compares contents, services.memory.core.content_key), and it
        asks to forget (small models quote the user's own statement of the fact instead)."""
        quote = content_key(self.user_request)
        return (
            bool(quote)
            and asks_to_forget(self.user_request)
            and any(quote in content_key(text) for text in said)
        )


class Extraction(BaseModel):
    """A model's structured answer, parsed; the values are checked by the tools themselves
    (MemoryWrite, MemoryForget), as a tool call's arguments are."""

    model_config = ConfigDict(extra="forbid", strict=True)

    memories: list[ExtractedMemory]
    forget: list[ForgetRequest]

    def calls(self, said: Sequence[str]) -> tuple[list[tuple[str, str]], int]:
        """The memory tool calls it stands for, (name, JSON arguments), and how many of its
        forgets were dropped because no message of `said` (the user's) holds their request:
        small models fill the list when nobody asked, and a forget destroys memories.
        Forgets come first, so a memory it also saves is never forgotten by the same answer."""
        asked = [f for f in self.forget if f.asked_in(said)]
        forgets = [
            (MemoryForget.name, json.dumps({"content_query": f.memory}, ensure_ascii=False))
            for f in asked
        ]
        writes = [
            (MemoryWrite.name, json.dumps(m.model_dump(), ensure_ascii=False))
            for m in self.memories
        ]
        return list(dict.fromkeys(forgets + writes)), len(self.forget) - len(asked)


def parse_extraction(text: str) -> Extraction:
    """The document `text` holds; ValueError saying why not (never the text itself: it is
    the model's output, which may repeat the owner's messages)."""
    try:
        # strict=False: a raw newline inside a string (llama-cpp-python's grammar lets one
        # through) is still the model's text, not a broken document.
        data = json.loads(text.strip(), strict=False)
    except ValueError:
        raise ValueError("not the JSON document asked for (not JSON)") from None
    try:
        return Extraction.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['type']}"
            for e in err.errors()[:3]
        )
        raise ValueError(f"not the JSON document asked for ({problems})") from None
