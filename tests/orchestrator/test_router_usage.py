"""The router's model call counts in the run's usage (issue 18): a router that asked a model
records its decision as a route message (audit only) carrying that call's usage, which the
run record and RUN_FINISHED sum with the executor's; a rule's decision records nothing."""

from __future__ import annotations

import uuid

from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.type.v1 import message_pb2

from shared.model.scripted import ScriptedModel
from shared.settings import Settings
from tests.grpc_helpers import owner_md
from tests.orchestrator.conftest import (
    ALICE,
    Suite,
    collect,
    history_of,
    run_record,
    running_suite,
    start_request,
)

# Two tools the input does not name: the router has a choice to make.
TOOLS = [
    message_pb2.ToolSpec(name="confirm", description="Ask the user"),
    message_pb2.ToolSpec(name="lookup", description="Look something up"),
]


async def _audit(suite: Suite, run_id: str) -> list[message_pb2.Message]:
    page = await suite.history.ListAudit(
        history_pb.ListAuditRequest(owner_id="alice", page_size=200),
        metadata=owner_md("alice", admin=True),
    )
    return [m for m in page.messages if m.run_id == run_id]


async def test_a_routing_model_calls_usage_is_in_the_runs_usage(settings: Settings) -> None:
    thread_id, run_id = f"t-{uuid.uuid4().hex}", f"r-{uuid.uuid4().hex}"
    request = start_request(thread_id, run_id, "hello there", tools=TOOLS)
    async with running_suite(settings, router_model=ScriptedModel()) as suite:
        events = await collect(suite.orchestrator.StartRun(request, metadata=ALICE))
        record = await run_record(suite, run_id)
        audit = await _audit(suite, run_id)
        shown = await history_of(suite, thread_id)
        context = await suite.history.LoadContext(
            history_pb.LoadContextRequest(thread_id=thread_id), metadata=ALICE
        )
    [route] = [m for m in audit if m.kind == message_pb2.MESSAGE_KIND_ROUTE]
    others = [m for m in audit if m.kind != message_pb2.MESSAGE_KIND_ROUTE and m.HasField("usage")]
    assert route.visibility_mask == 0 and route.role == message_pb2.ROLE_SYSTEM
    assert route.usage.input_tokens > 0 and route.usage.output_tokens > 0
    assert others, "the worker's reply has its own usage"
    # The run's usage is the router's call plus the worker's.
    assert record.usage.input_tokens == sum(m.usage.input_tokens for m in [route, *others])
    assert record.usage.output_tokens == sum(m.usage.output_tokens for m in [route, *others])
    assert events[-1].run_finished.usage == record.usage
    # Audit only: neither in /history nor in the next run's context.
    assert route.id not in {m.id for m in shown}
    assert route.id not in {m.id for m in context.messages}


async def test_a_rule_decision_records_no_route_message(settings: Settings) -> None:
    thread_id, run_id = f"t-{uuid.uuid4().hex}", f"r-{uuid.uuid4().hex}"
    request = start_request(thread_id, run_id, "hello there", tools=TOOLS)
    async with running_suite(settings) as suite:  # the scripted default: the rule decides
        await collect(suite.orchestrator.StartRun(request, metadata=ALICE))
        audit = await _audit(suite, run_id)
    assert audit and all(m.kind != message_pb2.MESSAGE_KIND_ROUTE for m in audit)
