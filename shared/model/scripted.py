"""The offline scripted model: deterministic (the same conversation and tools always give the
same chunks), streamed token by token with an optional simulated latency per token.

What it does, decided from the conversation in this order (`respond` is the pure core):

1. Route. A system message containing ROUTE_MARKER (ROUTER_PROMPT has it, with instructions
   a real model follows too) makes the reply one JSON object, streamed as text:
   {"executor": "worker"|"memory", "tools": [names], "reason": "..."} = `route(text, tools)`
   for the last user message and the names of the offered tools: executor memory when the
   user asks to remember or forget something ("remember ...", "forget ...", "记住", "忘记"),
   worker otherwise; tools: the offered tools the user asks for (grammar below) or names.
2. Extract memories. Asked for the MEMORY_EXTRACTION document (an output_schema of that
   name, MEMORY_MARKER in the system message): {"memories": [{"content", "kind"}],
   "forget": [{"memory", "user_request"}]} of the facts `extract_facts` finds in the user
   messages (any other output_schema: "{}"). A system message containing MEMORY_MARKER
   (MEMORY_PROMPT has it) with memory_write and/or memory_forget offered: the facts
   `extract_facts` finds in the user messages become one tool call each, in order:
   memory_write {"content", "kind"} for preference/dislike/name/place, memory_forget
   {"content_query"} for forget. No facts: the reply "NO_MEMORIES: no durable facts
   found." After the tool results: a summary ("Saved 2 memories, forgot 0.").
3. Call tools. The last user message asks for a tool with
       (use|call|run|invoke) [the] <name> tool [with|using|:] [<JSON object>]
       (使用|调用) <name> 工具 [<JSON object>]
   (several requests, several calls; no JSON: {}; a "{" that does not parse: the rest of
   the line as the raw input, for testing invalid arguments). The model, like a real one,
   calls the named tool whether or not it was offered: enforcing the tool policy is the
   executor's job. A call streams as a ToolCallBlock with the name and an empty input,
   then its input in 5-character fragments (split mid-JSON), then finished_reason
   "tool_calls". Once the conversation has tool calls after the last user message, the
   model does not call again: it summarises the results ("The search tool returned: ...").
4. Otherwise reply: 'You said: "<last user text>". This is turn <n> of our conversation.'

Parameters (see models/scripted.yaml): thinking (stream a short reasoning first),
max_tokens (cut the text, finished_reason "length"), token_latency (seconds per token,
overriding the constructor's), first_token_latency (seconds before the first token, a real
model's time to first token; 0: as any token).

`extract_facts(text)` is also usable directly: English and Chinese preferences ("I
love/like/prefer/enjoy X", "我喜欢X"), dislikes ("I hate/dislike X", "I don't like X",
"我不喜欢X", "我讨厌X"), names ("my name is X", "call me X", "我叫X"), places ("I live in
X", "I moved to X", "我住在X") and forgets ("forget [that] ...", "忘记/忘掉/忘了..."); questions
are skipped. A forget's content is the content of the fact it names, so it matches what a
memory_write stored ("forget that I love green tea" -> "User likes green tea").
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from shared.messages import (
    Msg,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultState,
    Usage,
)
from shared.model.base import ChatResponse, OutputSchema, ToolSpec
from shared.model.cards import ModelCard

ROUTE_MARKER = "[agentmesh:route]"
MEMORY_MARKER = "[agentmesh:extract-memories]"
ROUTER_PROMPT = (
    f"{ROUTE_MARKER} You are the router. Read the conversation and reply with exactly one JSON "
    'object and nothing else: {"executor": "worker" or "memory", "tools": [names of the offered '
    'tools the next step needs], "reason": "one short sentence"}.'
)
# What a memory model answers when the messages hold nothing to save or forget: the one text
# answer the memory agent accepts instead of tool calls (any other prose is unusable output).
NO_MEMORIES = "NO_MEMORIES"
MEMORY_PROMPT = (
    f"{MEMORY_MARKER} You are the memory agent. Find durable facts about the user in the user "
    "messages (preferences, dislikes, name, where they live) and requests to forget something. "
    "Call memory_write once per new fact with its content and kind, and memory_forget with a "
    "content_query for each request to forget. Reply briefly when done. If there is nothing "
    f"to save or forget, reply {NO_MEMORIES} and nothing else."
)
MEMORY_WRITE = "memory_write"
MEMORY_FORGET = "memory_forget"
# Structured extraction (a card's memory_extraction: structured): the memory agent asks for
# one JSON document of this name (its schema: services.executor.memory_tools), under this
# prompt; the scripted model answers it from extract_facts.
MEMORY_EXTRACTION = "memory_extraction"
MEMORY_EXTRACTION_PROMPT = (
    f"{MEMORY_MARKER} You are the memory agent. Read the user's messages and write down the "
    "lasting facts the user states about themselves: their name, where they live, what they "
    "like, love or dislike, other durable facts. Each memory is one short sentence about the "
    "user, in the user's language, with its kind. Only when the user asks you to forget "
    'something, "forget" holds what that memory says and the user\'s request, copied word for '
    'word; otherwise it is empty. Answer with the JSON object only: {"memories": [...], '
    '"forget": [...]}.'
)

_WORD = re.compile(r"\S+\s*|\s+")
_ARG_FRAGMENT = 5

FactKind = Literal["preference", "dislike", "name", "place", "forget"]


# ---- facts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """A durable fact (or a request to forget one) found in a user's statement."""

    kind: FactKind
    value: str  # what the fact is about: "green tea", "Lin", "Shanghai", or what to forget
    content: str  # the memory as stored: "User likes green tea", "用户叫林"
    language: Literal["en", "zh"]


_EN_CONTENT = {
    "preference": "User likes {}",
    "dislike": "User dislikes {}",
    "name": "User's name is {}",
    "place": "User lives in {}",
}
_ZH_CONTENT = {
    "preference": "用户喜欢{}",
    "dislike": "用户不喜欢{}",
    "name": "用户叫{}",
    "place": "用户住在{}",
}

_I = re.IGNORECASE
_PATTERNS: list[tuple[FactKind, Literal["en", "zh"], re.Pattern[str]]] = [
    ("forget", "en", re.compile(r"^(?:please\s+)?forget\s+(?:that\s+|about\s+)?(?P<v>.+)$", _I)),
    ("forget", "zh", re.compile(r"^(?:请)?(?:忘记|忘掉|忘了)(?:我说过)?(?P<v>.+)$")),
    (
        "dislike",
        "en",
        re.compile(
            r"\bI\s+(?:really\s+|also\s+)?(?:hate|dislike|detest|can'?t\s+stand|"
            r"(?:do\s+not|don'?t)\s+(?:really\s+)?(?:like|love|enjoy))\s+(?P<v>.+)",
            _I,
        ),
    ),
    (
        "dislike",
        "zh",
        re.compile(r"我(?:很|非常|真的|特别|也)?(?:不喜欢|讨厌|不爱吃|不爱喝)(?P<v>.+)"),
    ),
    (
        "preference",
        "en",
        re.compile(
            r"\bI\s+(?:really\s+|also\s+|just\s+)?(?:love|like|prefer|enjoy|adore)\s+(?P<v>.+)", _I
        ),
    ),
    (
        "preference",
        "zh",
        re.compile(r"我(?:很|非常|真的|特别|最|也|还)?(?:喜欢|偏爱|爱吃|爱喝)(?P<v>.+)"),
    ),
    (
        "name",
        "en",
        re.compile(r"\b(?:my\s+name\s+is|call\s+me|I'?m\s+called|I\s+am\s+called)\s+(?P<v>.+)", _I),
    ),
    ("name", "zh", re.compile(r"(?:我叫|我的名字是|我的名字叫)(?P<v>.+)")),
    (
        "place",
        "en",
        re.compile(
            r"\bI\s+(?:live|am\s+living|'m\s+living|(?:have\s+|just\s+)?moved)\s+(?:in|to)\s+(?P<v>.+)",
            _I,
        ),
    ),
    ("place", "zh", re.compile(r"我(?:现在)?(?:住在|居住在|生活在|搬到了?)(?P<v>.+)")),
]

_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]*")
_CLAUSE_BREAK = re.compile(
    r"(?:[,，;；]\s*|\s+(?:and|but|also|plus)\s+|而且|并且|还有|但是|另外)"
    r"(?=(?:I\b|I'm\b|I'd\b|my\b|please\b|forget\b|call me\b|我|请|忘记|忘掉|忘了))",
    _I,
)
_TRAILING = re.compile(
    r"(?:\s+(?:very much|so much|a lot|too|as well))+$|[\s.,;:!?。，；：！？、~]+$", _I
)


def _clean(value: str) -> str:
    previous = None
    while previous != value:
        previous, value = value, _TRAILING.sub("", value.strip())
    return value[:100]


def _name(value: str) -> str:
    """A name is its first word and the capitalised words right after it ("Lin Wei")."""
    words = value.split()
    if not words:
        return ""
    kept = [words[0]]
    for w in words[1:]:
        if not w[:1].isupper():
            break
        kept.append(w)
    return " ".join(kept)


def _clauses(text: str) -> list[str]:
    out: list[str] = []
    for sentence in _SENTENCE.findall(text):
        sentence = sentence.strip()
        if not sentence or sentence.endswith(("?", "？")):
            continue
        out.extend(c.strip() for c in _CLAUSE_BREAK.split(sentence) if c.strip())
    return out


def _fact(clause: str, *, allow_forget: bool = True) -> Fact | None:
    for kind, language, pattern in _PATTERNS:
        if kind == "forget" and not allow_forget:
            continue
        match = pattern.search(clause)
        if match is None:
            continue
        value = _clean(match.group("v"))
        if kind == "name":
            value = _name(value) if language == "en" else value.split()[0] if value else ""
            value = _clean(value)
        if not value:
            continue
        if kind == "forget":
            inner = [f for c in _clauses(value) if (f := _fact(c, allow_forget=False)) is not None]
            content = inner[0].content if len(inner) == 1 else value
            return Fact("forget", value, content, language)
        template = (_EN_CONTENT if language == "en" else _ZH_CONTENT)[kind]
        return Fact(kind, value, template.format(value), language)
    return None


def extract_facts(text: str) -> list[Fact]:
    """The durable facts (and forget requests) of one user statement, in order, deduplicated."""
    facts: list[Fact] = []
    for clause in _clauses(text):
        fact = _fact(clause)
        if fact is not None and fact not in facts:
            facts.append(fact)
    return facts


# ---- tool requests and routing --------------------------------------------------------------

_TOOL_REQUEST = re.compile(
    r"\b(?:use|call|run|invoke)\s+(?:the\s+)?`?(?P<en>[A-Za-z_][\w.\-]*)`?\s+tool\b"
    r"|(?:使用|调用)\s*(?P<zh>[A-Za-z_][\w.\-]*)\s*工具",
    _I,
)
_ARGS_LEAD = re.compile(r"\s*(?:with|using|:|：)?\s*", _I)


@dataclass(frozen=True)
class ToolRequest:
    name: str
    input: str  # the raw JSON text as the user wrote it ("{}" when none)


def tool_requests(text: str) -> list[ToolRequest]:
    """The tool calls `text` asks for, by the grammar in the module docstring."""
    out = []
    decoder = json.JSONDecoder()
    for match in _TOOL_REQUEST.finditer(text):
        name = match.group("en") or match.group("zh")
        rest_at = _ARGS_LEAD.match(text, match.end())
        at = rest_at.end() if rest_at else match.end()
        raw = "{}"
        if text.startswith("{", at):
            try:
                _, end = decoder.raw_decode(text, at)
                raw = text[at:end]
            except json.JSONDecodeError:
                raw = text[at:].split("\n", 1)[0].strip()
        out.append(ToolRequest(name, raw))
    return out


@dataclass(frozen=True)
class Route:
    executor: Literal["worker", "memory"]
    tools: tuple[str, ...] = ()
    reason: str = ""

    def to_json(self) -> str:
        return json.dumps(
            {"executor": self.executor, "tools": list(self.tools), "reason": self.reason},
            ensure_ascii=False,
        )


_MEMORY_COMMAND = re.compile(r"\b(?:remember|forget)\b|记住|忘记|忘掉", _I)


def route(text: str, tools: Sequence[str] = ()) -> Route:
    """The scripted router's decision for the user's `text`, given the offered tool names."""
    offered = list(dict.fromkeys(tools))
    asked = {r.name for r in tool_requests(text)}
    words = set(re.findall(r"[\w.\-]+", text.lower()))
    chosen = tuple(t for t in offered if t in asked or t.lower() in words)
    if _MEMORY_COMMAND.search(text):
        return Route("memory", chosen, "the user asks to remember or forget something")
    if chosen:
        return Route("worker", chosen, "the user asks for " + ", ".join(chosen))
    return Route("worker", (), "general conversation")


# ---- the reply ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """What the scripted model answers, before streaming."""

    text: str = ""
    thinking: str = ""
    tool_calls: tuple[ToolCallBlock, ...] = ()
    finished_reason: str = "stop"


def reply_text(messages: Sequence[Msg]) -> str:
    """The scripted reply to the last user message, aware of how long the conversation is."""
    last = next((m for m in reversed(messages) if m.role == Role.USER), None)
    said = last.text.strip() if last is not None else ""
    turns = sum(1 for m in messages if m.role == Role.USER)
    if not said:
        return "I did not catch that. Could you say it again?"
    return f'You said: "{said}". This is turn {turns} of our conversation.'


def _call_id(messages: Sequence[Msg], index: int, name: str) -> str:
    seed = json.dumps(
        [len(messages), [m.text for m in messages[-3:]], index, name], ensure_ascii=False
    )
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:16]


def _calls(
    messages: Sequence[Msg], requests: Sequence[tuple[str, str]]
) -> tuple[ToolCallBlock, ...]:
    return tuple(
        ToolCallBlock(id=_call_id(messages, i, name), name=name, input=raw)
        for i, (name, raw) in enumerate(requests)
    )


def _summary(after: Sequence[Msg]) -> str:
    lines = []
    for m in after:
        for r in m.tool_results:
            verb = (
                "returned" if r.state == ToolResultState.SUCCESS else f"ended with {r.state.value}"
            )
            lines.append(f"The {r.name or 'requested'} tool {verb}: {r.text}".rstrip(": ") + ".")
    return " ".join(lines) or "The tools returned nothing."


def _memory_summary(after: Sequence[Msg]) -> str:
    results = [r for m in after for r in m.tool_results]
    saved = sum(1 for r in results if r.name == MEMORY_WRITE and r.state == ToolResultState.SUCCESS)
    forgot = sum(
        1 for r in results if r.name == MEMORY_FORGET and r.state == ToolResultState.SUCCESS
    )
    failed = sum(1 for r in results if r.state != ToolResultState.SUCCESS)
    tail = f" {failed} failed." if failed else ""
    return f"Saved {saved} {'memory' if saved == 1 else 'memories'}, forgot {forgot}.{tail}"


def extraction_document(messages: Sequence[Msg]) -> str:
    """The structured answer to a memory extraction: the facts of the user messages."""
    memories: list[dict[str, str]] = []
    forget: list[dict[str, str]] = []
    for m in messages:
        if m.role != Role.USER:
            continue
        for fact in extract_facts(m.text):
            if fact.kind == "forget":
                forget.append({"memory": fact.content, "user_request": m.text})
            else:
                memories.append({"content": fact.content, "kind": fact.kind})
    return json.dumps({"memories": memories, "forget": forget}, ensure_ascii=False)


def respond(
    messages: Sequence[Msg],
    tools: Sequence[ToolSpec] = (),
    *,
    thinking: bool = False,
    output_schema: OutputSchema | None = None,
) -> Reply:
    """The scripted model's answer to `messages` offering `tools` (see the module docstring)."""
    system_text = "\n".join(m.text for m in messages if m.role == Role.SYSTEM)
    last_user = max((i for i, m in enumerate(messages) if m.role == Role.USER), default=-1)
    said = messages[last_user].text if last_user >= 0 else ""
    after = messages[last_user + 1 :]
    already_called = any(m.tool_calls for m in after)
    offered = [t.name for t in tools]
    think = f'The user said "{said.strip()}". I will answer briefly.' if thinking else ""

    if output_schema is not None:
        if MEMORY_MARKER in system_text and output_schema.name == MEMORY_EXTRACTION:
            return Reply(text=extraction_document(messages), thinking=think)
        return Reply(text="{}", thinking=think)  # a schema it does not know

    if ROUTE_MARKER in system_text:
        return Reply(text=route(said, offered).to_json(), thinking=think)

    if MEMORY_MARKER in system_text and {MEMORY_WRITE, MEMORY_FORGET} & set(offered):
        if already_called:
            return Reply(text=_memory_summary(after), thinking=think)
        requests = []
        for m in messages:
            if m.role != Role.USER:
                continue
            for fact in extract_facts(m.text):
                if fact.kind == "forget" and MEMORY_FORGET in offered:
                    query = {"content_query": fact.content}
                    requests.append((MEMORY_FORGET, json.dumps(query, ensure_ascii=False)))
                elif fact.kind != "forget" and MEMORY_WRITE in offered:
                    args = {"content": fact.content, "kind": fact.kind}
                    requests.append((MEMORY_WRITE, json.dumps(args, ensure_ascii=False)))
        requests = list(dict.fromkeys(requests))
        if not requests:
            return Reply(text=f"{NO_MEMORIES}: no durable facts found.", thinking=think)
        return Reply(
            thinking=think, tool_calls=_calls(messages, requests), finished_reason="tool_calls"
        )

    if already_called:
        return Reply(text=_summary(after), thinking=think)
    requests = [(r.name, r.input) for r in tool_requests(said)]
    if requests:
        return Reply(
            thinking=think, tool_calls=_calls(messages, requests), finished_reason="tool_calls"
        )
    return Reply(text=reply_text(messages), thinking=think)


# ---- streaming --------------------------------------------------------------------------------


@dataclass
class _Params:
    thinking: bool = False
    max_tokens: int | None = None
    token_latency: float | None = None
    first_token_latency: float | None = None


class ScriptedModel:
    name = "scripted"

    def __init__(
        self,
        token_latency: float = 0.0,
        *,
        first_token_latency: float = 0.0,
        card: ModelCard | None = None,
    ) -> None:
        self.token_latency = token_latency
        self.first_token_latency = first_token_latency
        self.card = card

    def _params(self, options: Mapping[str, Any] | None) -> _Params:
        values = dict(options or {})
        if self.card is not None:
            values = self.card.resolve_parameters(values)
        return _Params(
            thinking=bool(values.get("thinking", False)),
            max_tokens=values.get("max_tokens"),
            token_latency=values.get("token_latency"),
            first_token_latency=values.get("first_token_latency"),
        )

    async def stream(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec] = (),
        options: Mapping[str, Any] | None = None,
        output_schema: OutputSchema | None = None,
    ) -> AsyncGenerator[ChatResponse, None]:
        params = self._params(options)
        latency = self.token_latency if params.token_latency is None else params.token_latency
        first = (
            self.first_token_latency
            if params.first_token_latency is None
            else params.first_token_latency
        )
        reply = respond(messages, tools, thinking=params.thinking, output_schema=output_schema)
        emitted = 0
        waited = False

        async def pause() -> None:
            # The first token waits the time to first token (a real model's prefill), if
            # one is set; every token after it, the time per token.
            nonlocal waited
            wait = first if first and not waited else latency
            waited = True
            if wait:
                await asyncio.sleep(wait)

        for token in _WORD.findall(reply.thinking):
            await pause()
            emitted += 1
            yield ChatResponse(content=(ThinkingBlock(token),))

        finished = reply.finished_reason
        for token in _WORD.findall(reply.text):
            if params.max_tokens is not None and emitted >= params.max_tokens:
                finished = "length"
                break
            await pause()
            emitted += 1
            yield ChatResponse(content=(TextBlock(token),))

        for call in reply.tool_calls:
            await pause()
            yield ChatResponse(content=(ToolCallBlock(id=call.id, name=call.name, input=""),))
            for i in range(0, len(call.input), _ARG_FRAGMENT):
                await pause()
                emitted += 1
                fragment = call.input[i : i + _ARG_FRAGMENT]
                yield ChatResponse(content=(ToolCallBlock(id=call.id, name="", input=fragment),))

        prompt_tokens = sum(len(m.text.split()) for m in messages)
        yield ChatResponse(
            is_last=True, finished_reason=finished, usage=Usage(prompt_tokens, emitted)
        )
