"""Message contents, memories and tool arguments never reach the logs, even at DEBUG,
unless AGENTMESH_LOG_CONTENTS says so."""

from __future__ import annotations

import json
import uuid

from agentmesh.memory.v1 import memory_service_pb2, memory_service_pb2_grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc
from agentmesh.type.v1 import message_pb2

from shared.messages import msg_to_pb, user
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, profile_to_pb
from shared.settings import Settings
from tests.grpc_helpers import channel, owner_md
from tests.observability.suite import bearer, gateway, json_log_lines, run_body, running_suite

ALICE = owner_md("alice")


def _start(thread_id: str, text: str, **fields: object) -> pb.StartRunRequest:
    values: dict[str, object] = {
        "thread_id": thread_id,
        "run_id": uuid.uuid4().hex,
        "messages": [msg_to_pb(user(text))],
        "origin": message_pb2.RUNTIME_MODE_CHAT,
    }
    values.update(fields)
    return pb.StartRunRequest(**values)


async def _drain(call: object) -> None:
    # The stream call object is async iterable.
    async for _ in call:  # type: ignore[attr-defined]
        pass


async def _exercise(settings: Settings, secret: str) -> None:
    """A chat run, a memory run that writes a memory from it, a refused tool call with
    arguments, a direct memory write and an HTTP run through the gateway: all carrying
    `secret` in contents only."""
    async with running_suite(settings) as suite:
        async with channel(suite.addrs["orchestrator"]) as ch:
            stub = pb_grpc.OrchestratorServiceStub(ch)
            chat = uuid.uuid4().hex
            await _drain(stub.StartRun(_start(chat, f"I love {secret}"), metadata=ALICE))
            await _drain(
                stub.StartRun(
                    _start(
                        uuid.uuid4().hex,
                        "Extract durable memories.",
                        origin=message_pb2.RUNTIME_MODE_AUTOMATION,
                        profile=profile_to_pb(AUTOMATION_MEMORY_DEFAULT),
                        declared_tools=["memory_write", "memory_forget"],
                    ),
                    metadata=ALICE,
                )
            )
            said = f'call the memory_write tool with {{"content": "{secret} arguments"}}'
            await _drain(stub.StartRun(_start(uuid.uuid4().hex, said), metadata=ALICE))
        async with channel(suite.addrs["memory"]) as ch:
            memory = memory_service_pb2_grpc.MemoryServiceStub(ch)
            await memory.WriteMemory(
                memory_service_pb2.WriteMemoryRequest(content=f"{secret} memory"), metadata=ALICE
            )
        async with gateway(suite.settings) as http:
            body = run_body(uuid.uuid4().hex, uuid.uuid4().hex, f"gateway {secret}")
            resp = await http.post(
                "/api/v1/agent/runs", json=body, headers=bearer(suite.settings, "alice")
            )
            assert resp.status_code == 200 and secret in resp.text


def _lines(raw: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


async def test_contents_are_not_logged_even_at_debug(settings: Settings) -> None:
    secret = f"zq{uuid.uuid4().hex[:10]}"
    with json_log_lines("DEBUG") as out:
        await _exercise(settings, secret)
    lines = _lines(out.getvalue())
    # The capture saw the calls (every RPC has a debug access line) ...
    assert any(line.get("msg") == "rpc" for line in lines)
    # ... and none of them carries a content.
    leaks = [line for line in lines if secret in json.dumps(line, ensure_ascii=False)]
    assert leaks == []


async def test_log_contents_setting_lets_contents_into_the_debug_access_lines(
    settings: Settings,
) -> None:
    secret = f"zq{uuid.uuid4().hex[:10]}"
    with json_log_lines("DEBUG", contents=True) as out:
        await _exercise(settings, secret)
    rpc_lines = [line for line in _lines(out.getvalue()) if line.get("msg") == "rpc"]
    assert any(secret in str(line.get("request", "")) for line in rpc_lines)


def _fail_with(secret: str) -> None:
    try:
        json.loads(secret)  # a parse error quotes what it failed on
    except ValueError as exc:
        raise RuntimeError(f"tool failed on {secret!r}") from exc


def test_a_logged_exception_keeps_its_traceback_but_not_its_message() -> None:
    import logging

    secret = f"{{private-{uuid.uuid4().hex}"
    for contents in (False, True):
        with json_log_lines("INFO", contents=contents) as out:
            try:
                _fail_with(secret)
            except RuntimeError:
                logging.getLogger("agentmesh.test").exception("tool failed")
        line = json.loads(out.getvalue().splitlines()[-1])
        exc = line["exc"]
        # Where it failed, and of what type, whatever the setting; the cause is there too.
        assert "_fail_with" in exc and "RuntimeError" in exc and "JSONDecodeError" in exc
        assert (secret in exc) is contents
