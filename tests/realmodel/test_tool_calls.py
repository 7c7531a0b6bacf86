"""A tool-calling conversation of several turns on the real local model server.

SmolLM2-135M on llama-cpp-python's chatml-function-calling calls no tool without a
tool_choice, and the smollm2-local card offers none, so the model's tool calls are scripted:
this module's suite talks to ScriptingProxy, a small HTTP proxy in front of the real server.
A streamed model call that offers memory_search and whose last message is the user's,
holding a cue ("(search)", "(broken call)"), is answered by the proxy itself with a tool
call streamed in the OpenAI format (arguments that are a JSON object, or text that is not
JSON); every other request (the model's turn after the tool's result, every later run of the
thread) goes to the real server unchanged, and the proxy records what the server answered.
So the real server judges exactly what agentmesh sends once a tool was called: the assistant
message with its tool_calls, and the tool's result, in every later call of the thread.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from services.launcher import LocalModelServer, Suite
from tests.e2e.conftest import _dump_logs, make_suite
from tests.realmodel.conftest import assert_well_formed, chat, history, new_id, streamed_text

pytestmark = pytest.mark.realmodel

SEARCH_CUE, BROKEN_CUE = "(search)", "(broken call)"


@dataclass
class Forwarded:
    """One request the proxy sent to the real server, and its answer."""

    body: dict[str, Any]
    status: int
    answer: bytes


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _tool_call_stream(call_id: str, arguments: str) -> bytes:
    """A tool call of memory_search as an OpenAI-compatible server streams one: the call's
    id and name first, its arguments in two pieces, then finish_reason tool_calls."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            "id": f"chatcmpl-{call_id}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "smollm2-135m-instruct",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n".encode()

    half = len(arguments) // 2
    first = {"index": 0, "id": call_id, "type": "function"}
    first["function"] = {"name": "memory_search", "arguments": ""}
    return b"".join(
        [
            chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}),
            chunk({}, "tool_calls"),
            b"data: [DONE]\n\n",
        ]
    )


class ScriptingProxy:
    """The real model server behind a proxy that answers the cued calls itself."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.removesuffix("/v1")
        self.forwarded: list[Forwarded] = []
        self.scripted: list[str] = []  # the ids of the tool calls it answered
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                proxy.forward(self, b"")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                scripted = proxy.script(json.loads(raw or b"{}"))
                if scripted is None:
                    proxy.forward(self, raw)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(scripted)))
                self.end_headers()
                self.wfile.write(scripted)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, body: dict[str, Any]) -> bytes | None:
        offered = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        messages = body.get("messages") or [{}]
        said = _text(messages[-1].get("content")) if messages[-1].get("role") == "user" else ""
        if not body.get("stream") or "memory_search" not in offered:
            return None
        if SEARCH_CUE in said:
            arguments = json.dumps({"query": "tea"})
        elif BROKEN_CUE in said:
            arguments = '{"query": "tea'  # cut: not JSON
        else:
            return None
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        with self._lock:
            self.scripted.append(call_id)
        return _tool_call_stream(call_id, arguments)

    def forward(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        headers = {
            k: v for k, v in handler.headers.items() if k.lower() in ("content-type", "accept")
        }
        method = "POST" if raw else "GET"
        answer = b""
        with (
            httpx.Client(timeout=300) as client,
            client.stream(
                method, self.upstream + handler.path, content=raw or None, headers=headers
            ) as resp,
        ):
            handler.send_response(resp.status_code)
            handler.send_header("Content-Type", resp.headers.get("content-type", ""))
            handler.end_headers()  # HTTP/1.0: the answer ends when the connection closes
            for piece in resp.iter_raw():
                answer += piece
                handler.wfile.write(piece)
                handler.wfile.flush()
        if raw:
            with self._lock:
                self.forwarded.append(Forwarded(json.loads(raw), resp.status_code, answer))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def proxy(model_server: LocalModelServer) -> Iterator[ScriptingProxy]:
    p = ScriptingProxy(model_server.base_url)
    yield p
    p.close()


@pytest.fixture(scope="module")
def proxied_suite(
    tmp_path_factory: pytest.TempPathFactory, model_server: LocalModelServer, proxy: ScriptingProxy
) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("proxied")
    # The suite's model endpoint is the proxy, wherever model_server.env() names it.
    env = {
        k: proxy.base_url if v == model_server.base_url else v
        for k, v in model_server.env().items()
    }
    s = make_suite(
        tmp,
        f"p{uuid.uuid4().hex[:10]}_",
        shape="all",
        **env,
        AGENTMESH_RPC_TIMEOUT_SECONDS="10",
        AGENTMESH_RUN_TIMEOUT_SECONDS="240",
    )
    try:
        s.start(timeout=90)
    except RuntimeError:
        s.stop()
        _dump_logs(tmp / "logs")
        raise
    yield s
    s.stop()


def _called_tools(messages: list[dict[str, Any]]) -> list[str]:
    return [
        c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []
    ]


def test_a_thread_with_tool_calls_keeps_answering_on_the_real_server(
    proxied_suite: Suite, proxy: ScriptingProxy
) -> None:
    owner, thread = new_id("tom"), new_id("t")
    turns = [
        f"I drink green tea every morning. {SEARCH_CUE} What do you know about my drinks?",
        "Thanks. Say that again in one short sentence.",
        f"{BROKEN_CUE} Look again, please.",
        "Say goodbye in one short sentence.",
    ]
    for n, said in enumerate(turns):
        before = len(proxy.forwarded)
        events = chat(proxied_suite, owner, thread, said)
        assert_well_formed(events)
        finished = events[-1]
        assert finished["type"] == "RUN_FINISHED", (n, finished)
        assert finished["outcome"] == {"type": "success"}, (n, finished)
        # Its reply is the real model's, after the tool's result when it called one.
        assert streamed_text(events).strip(), n
        calls = [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START"]
        results = [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert calls == results == ([proxy.scripted[-1]] if n in (0, 2) else []), (n, events)
        # Every call the real server got in this run was accepted, and carried the thread's
        # earlier tool calls (from the first run on) back to it.
        sent = proxy.forwarded[before:]
        assert sent, n
        for request in sent:
            assert request.status == 200, (n, request.answer[:500])
            assert b'"error"' not in request.answer, (n, request.answer[-500:])
        assert _called_tools(sent[-1].body["messages"]) == proxy.scripted[: 1 if n < 2 else 2]
    # The arguments that were not JSON got an error result the model read; the thread's
    # history holds both calls, each answered.
    [broken] = [
        m for m in proxy.forwarded[-1].body["messages"]
        if m["role"] == "tool" and m.get("tool_call_id") == proxy.scripted[1]
    ]  # fmt: skip
    assert "not valid JSON" in _text(broken["content"])
    stored = history(proxied_suite, owner, thread)
    assert [c["id"] for m in stored for c in m.get("toolCalls") or []] == proxy.scripted
    assert [m["content"] for m in stored if m["role"] == "user"] == turns
