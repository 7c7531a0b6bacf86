"""Signed page tokens (shared/pagination.py): a client hands a token back as it got it; a
token changed, crafted, signed with another secret or issued for another request is
INVALID_ARGUMENT naming page_token, on every List RPC, never a 500."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.history.v1 import history_service_pb2_grpc as history_grpc
from agentmesh.memory.v1 import memory_service_pb2 as memory_pb
from agentmesh.memory.v1 import memory_service_pb2_grpc as memory_grpc
from agentmesh.scheduler.v1 import scheduler_service_pb2 as scheduler_pb
from agentmesh.scheduler.v1 import scheduler_service_pb2_grpc as scheduler_grpc
from agentmesh.type.v1 import content_pb2, message_pb2

from services.history.service import build as build_history
from services.memory.service import build as build_memory
from services.scheduler.service import build as build_scheduler
from shared import errors
from shared.errors import InvalidArgument
from shared.pagination import PageTokens, position_int, position_list, position_time
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, CHAT_DEFAULT, profile_to_pb
from shared.settings import Settings
from tests.grpc_helpers import channel, owner_md, running_service

ALICE = owner_md("alice")
ADMIN = owner_md("ops", admin=True)
SCOPE = ["history", "t-1", "forward"]


def _payload(token: str) -> dict[str, Any]:
    text = token.split(".")[0]
    # JSON of the token.
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))  # type: ignore[no-any-return]


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def _signed(secret: str, data: dict[str, Any]) -> str:
    """What a holder of `secret` could sign (the token layout of shared/pagination.py)."""
    payload = _b64(data)
    return f"{payload}.{PageTokens(secret)._mac(payload)}"


# ---- the codec ---------------------------------------------------------------------------


def test_a_token_round_trips_within_its_scope() -> None:
    tokens = PageTokens("s3cret")
    token = tokens.encode([12, "m-1"], SCOPE)
    assert tokens.decode(token, SCOPE) == [12, "m-1"]
    assert tokens.decode("", SCOPE) is None


def _refused(tokens: PageTokens, token: str, scope: Any = SCOPE) -> str:
    with pytest.raises(InvalidArgument) as caught:
        tokens.decode(token, scope)
    assert caught.value.violations[0][0] == "page_token"
    return caught.value.message


def test_a_changed_position_is_refused() -> None:
    tokens = PageTokens("s3cret")
    token = tokens.encode(10, SCOPE)
    data = _payload(token)
    data["p"] = 10**30
    mac = token.split(".")[1]
    assert "issued" in _refused(tokens, f"{_b64(data)}.{mac}")


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # the signature changed
        lambda t: t.split(".")[0],  # no signature
        lambda t: t + ".x",
        lambda t: "." + t.split(".")[1],
        lambda t: "not a token",
        lambda t: "é.é",
        lambda t: t.replace(".", ".\x00"),
    ],
)
def test_a_mangled_token_is_refused(mangle: Callable[[str], str]) -> None:
    tokens = PageTokens("s3cret")
    _refused(tokens, mangle(tokens.encode(10, SCOPE)))


def test_a_token_signed_with_another_secret_is_refused() -> None:
    token = PageTokens("another secret").encode(10, SCOPE)
    assert "issued" in _refused(PageTokens("s3cret"), token)


def test_a_token_of_another_request_is_refused() -> None:
    tokens = PageTokens("s3cret")
    token = tokens.encode(10, SCOPE)
    assert "different request" in _refused(tokens, token, ["history", "t-1", "backward"])


def test_a_signed_token_that_is_not_json_is_refused() -> None:
    payload = base64.urlsafe_b64encode(b"\xff\xfe").decode().rstrip("=")
    _refused(PageTokens("s3cret"), f"{payload}.{PageTokens('s3cret')._mac(payload)}")


@pytest.mark.parametrize("value", [-1, 2**63, 10**30, True, 1.5, "1", None, [1], {"a": 1}])
def test_a_position_number_is_a_whole_number_in_bigint_range(value: Any) -> None:
    with pytest.raises(InvalidArgument):
        position_int(value)


@pytest.mark.parametrize("value", ["2024-01-01T00:00:00", "yesterday", 5, None, ["2024-01-01"]])
def test_a_position_time_is_an_aware_iso_time(value: Any) -> None:
    with pytest.raises(InvalidArgument):
        position_time(value)


def test_a_position_list_has_its_length() -> None:
    assert position_list([1, 2], 2) == [1, 2]
    for value in ([1], [1, 2, 3], {"a": 1}, "ab", None):
        with pytest.raises(InvalidArgument):
            position_list(value, 2)


def test_the_secret_must_not_be_empty() -> None:
    with pytest.raises(ValueError):
        PageTokens("")


# ---- every List RPC ----------------------------------------------------------------------

# Positions no service issues: each must be refused even when signed with the real secret.
CRAFTED = [
    {"a": 1},
    10**30,
    -1,
    "x",
    [],
    [10**30, "a"],
    ["not-a-time", "x"],
    ["2024-01-01T00:00:00", "x"],
    [1, 2, 3],
    True,
]

List = Callable[[str], Awaitable[Any]]


async def _refuses(call: List, token: str) -> str | None:
    try:
        await call(token)
    except grpc.aio.AioRpcError as err:
        if err.code() is not grpc.StatusCode.INVALID_ARGUMENT:
            return f"{err.code().name}: {err.details()}"
        fields = [f for f, _ in errors.from_rpc_error(err).violations]
        return None if fields == ["page_token"] else f"names {fields}"
    return "accepted"


async def _tamper_failures(
    name: str, call: List, token: str, secret: str, foreign: str
) -> list[str]:
    """What `call` accepts or fails on among tamperings of its real `token`."""
    assert token, f"{name} gave no next page token"
    data = _payload(token)
    mac = token.split(".")[1]
    tampered: dict[str, str] = {
        "garbage": "garbage!",
        "signature changed": token[:-1] + ("A" if token[-1] != "A" else "B"),
        "unsigned": token.split(".")[0],
        "position changed": f"{_b64({**data, 'p': CRAFTED[0]})}.{mac}",
        "another secret": _signed("another secret", data),
        "another request": foreign,
    }
    for i, position in enumerate(CRAFTED):
        tampered[f"signed crafted position {i}"] = _signed(secret, {**data, "p": position})
    failures = []
    for label, bad in tampered.items():
        problem = await _refuses(call, bad)
        if problem:
            failures.append(f"{name} {label}: {problem}")
    return failures


def _msg(mid: str) -> message_pb2.Message:
    return message_pb2.Message(
        id=mid,
        role=message_pb2.ROLE_USER,
        kind=message_pb2.MESSAGE_KIND_USER_MESSAGE,
        content=[content_pb2.ContentBlock(text=content_pb2.TextBlock(text=f"hello {mid}"))],
    )


async def test_every_history_list_refuses_tampered_tokens(settings: Settings) -> None:
    secret = settings.page_token_secret
    async with running_service("history", build_history, settings) as address:
        async with channel(address) as ch:
            stub = history_grpc.HistoryServiceStub(ch)
            for thread in ("t-1", "t-2"):
                for run in ("r-1", "r-2"):
                    await stub.BeginRun(
                        history_pb.BeginRunRequest(
                            thread_id=thread,
                            run_id=f"{thread}-{run}",
                            runtime_mode=message_pb2.RUNTIME_MODE_CHAT,
                            profile=profile_to_pb(CHAT_DEFAULT),
                            input_messages=[_msg(f"{thread}-{run}-m")],
                        ),
                        metadata=ALICE,
                    )
                    await stub.FinishRun(
                        history_pb.FinishRunRequest(
                            run_id=f"{thread}-{run}",
                            state=history_pb.RUN_STATE_SUCCEEDED,
                        ),
                        metadata=ALICE,
                    )

            async def history(token: str) -> Any:
                return await stub.ListHistory(
                    history_pb.ListHistoryRequest(thread_id="t-1", page_size=1, page_token=token),
                    metadata=ALICE,
                    timeout=5,
                )

            async def context(token: str) -> Any:
                return await stub.LoadContext(
                    history_pb.LoadContextRequest(thread_id="t-1", page_size=1, page_token=token),
                    metadata=ALICE,
                    timeout=5,
                )

            async def threads(token: str) -> Any:
                return await stub.ListThreads(
                    history_pb.ListThreadsRequest(page_size=1, page_token=token),
                    metadata=ALICE,
                    timeout=5,
                )

            async def audit(token: str) -> Any:
                return await stub.ListAudit(
                    history_pb.ListAuditRequest(owner_id="alice", page_size=1, page_token=token),
                    metadata=ADMIN,
                    timeout=5,
                )

            lists = {
                "ListHistory": history,
                "LoadContext": context,
                "ListThreads": threads,
                "ListAudit": audit,
            }
            tokens = {name: (await call("")).next_page_token for name, call in lists.items()}
            failures = []
            for name, call in lists.items():
                # Another RPC's token is a real, signed token of another request.
                foreign = tokens["ListThreads" if name != "ListThreads" else "ListHistory"]
                failures += await _tamper_failures(name, call, tokens[name], secret, foreign)
                # The real token still works.
                await call(tokens[name])
    assert failures == []


async def test_memory_list_refuses_tampered_tokens(settings: Settings) -> None:
    async with running_service("memory", build_memory, settings) as address:
        async with channel(address) as ch:
            stub = memory_grpc.MemoryServiceStub(ch)
            for content in ("User likes green tea", "User lives in Lyon"):
                await stub.WriteMemory(
                    memory_pb.WriteMemoryRequest(content=content), metadata=ALICE
                )

            async def memories(token: str, md: Any = ALICE) -> Any:
                return await stub.ListMemories(
                    memory_pb.ListMemoriesRequest(page_size=1, page_token=token),
                    metadata=md,
                    timeout=5,
                )

            token = (await memories("")).next_page_token
            await stub.WriteMemory(
                memory_pb.WriteMemoryRequest(content="Bob likes jazz"), metadata=owner_md("bob")
            )
            await stub.WriteMemory(
                memory_pb.WriteMemoryRequest(content="Bob likes rock"), metadata=owner_md("bob")
            )
            # Bob's token is bound to bob: for alice it is another request's.
            foreign = (await memories("", owner_md("bob"))).next_page_token
            failures = await _tamper_failures(
                "ListMemories", memories, token, settings.page_token_secret, foreign
            )
            await memories(token)
    assert failures == []


async def test_scheduler_lists_refuse_tampered_tokens(settings: Settings) -> None:
    async with running_service("scheduler", build_scheduler, settings) as address:
        async with channel(address) as ch:
            stub = scheduler_grpc.SchedulerServiceStub(ch)
            job_ids = []
            for title in ("digest", "review"):
                reply = await stub.CreateJob(
                    scheduler_pb.CreateJobRequest(
                        job=scheduler_pb.Job(
                            title=title,
                            schedule=scheduler_pb.Schedule(
                                type=scheduler_pb.SCHEDULE_TYPE_DAILY, local_time="10:00"
                            ),
                            timezone="Europe/London",
                            config=scheduler_pb.JobConfig(
                                prompt="summarise my day", tools=["memory_write"]
                            ),
                            execution_profile=profile_to_pb(AUTOMATION_MEMORY_DEFAULT),
                        ),
                        request_id=uuid.uuid4().hex,
                    ),
                    metadata=ALICE,
                )
                job_ids.append(reply.job.id)
            for _ in range(2):
                await stub.TriggerJob(
                    scheduler_pb.TriggerJobRequest(job_id=job_ids[0]), metadata=ALICE
                )
                await asyncio.sleep(0.01)  # two runs, not two at one instant

            async def jobs(token: str) -> Any:
                return await stub.ListJobs(
                    scheduler_pb.ListJobsRequest(page_size=1, page_token=token),
                    metadata=ALICE,
                    timeout=5,
                )

            async def runs(token: str) -> Any:
                return await stub.ListJobRuns(
                    scheduler_pb.ListJobRunsRequest(
                        job_id=job_ids[0], page_size=1, page_token=token
                    ),
                    metadata=ALICE,
                    timeout=5,
                )

            jobs_token = (await jobs("")).next_page_token
            runs_token = (await runs("")).next_page_token
            secret = settings.page_token_secret
            failures = await _tamper_failures("ListJobs", jobs, jobs_token, secret, runs_token)
            failures += await _tamper_failures("ListJobRuns", runs, runs_token, secret, jobs_token)
            await jobs(jobs_token)
            await runs(runs_token)
    assert failures == []


async def test_the_gateway_answers_a_tampered_token_with_400_naming_page_token(
    settings: Settings,
) -> None:
    from services.gateway.auth import issue_token
    from tests.observability.suite import gateway

    async with running_service("history", build_history, settings) as address:
        async with channel(address) as ch:
            stub = history_grpc.HistoryServiceStub(ch)
            for run in ("r-1", "r-2"):
                await stub.BeginRun(
                    history_pb.BeginRunRequest(
                        thread_id="t-1",
                        run_id=run,
                        runtime_mode=message_pb2.RUNTIME_MODE_CHAT,
                        profile=profile_to_pb(CHAT_DEFAULT),
                        input_messages=[_msg(f"{run}-m")],
                    ),
                    metadata=ALICE,
                )
                await stub.FinishRun(
                    history_pb.FinishRunRequest(run_id=run, state=history_pb.RUN_STATE_SUCCEEDED),
                    metadata=ALICE,
                )
        peers = settings.model_copy(update={"history_addr": address})
        auth = {"Authorization": f"Bearer {issue_token(peers, 'alice')}"}
        path = "/api/v1/agent/threads/t-1/history"
        async with gateway(peers) as http:
            first = await http.get(path, params={"page_size": 1}, headers=auth)
            token = first.json()["nextPageToken"]
            # The issue's 500: a real token whose position was made 10**30.
            crafted = _signed(settings.page_token_secret, {**_payload(token), "p": 10**30})
            changed = f"{_b64({**_payload(token), 'p': 10**30})}.{token.split('.')[1]}"
            answers = [
                await http.get(path, params={"page_size": 1, "page_token": bad}, headers=auth)
                for bad in (crafted, changed, token[:-2])
            ]
            assert (
                await http.get(path, params={"page_token": token}, headers=auth)
            ).status_code == 200
    for resp in answers:
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["details"][0]["field"] == "page_token"
