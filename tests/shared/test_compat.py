"""Unknown enum values: read as UNSPECIFIED inside the data a request carries (a message and
its content blocks), refused anywhere else (a choice the caller made)."""

from __future__ import annotations

from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as orchestrator_pb
from agentmesh.type.v1 import content_pb2, execution_profile_pb2, message_pb2

from shared.compat import check_enums


def test_an_unknown_choice_is_refused_naming_the_field_and_left_as_sent() -> None:
    request = history_pb.ListHistoryRequest(thread_id="t")
    request.direction = 77
    found = check_enums(request)
    assert found.refused == [("direction", 77)]
    assert found.reset == []
    assert request.direction == 77


def test_unknown_choices_deep_in_a_request_are_named_by_their_path() -> None:
    profile = execution_profile_pb2.ExecutionProfile(name="p")
    profile.tool_policy.mode = 99
    request = orchestrator_pb.StartRunRequest(run_id="r", profile=profile)
    request.multitask_strategy = 99
    assert sorted(check_enums(request).refused) == [
        ("multitask_strategy", 99),
        ("profile.tool_policy.mode", 99),
    ]
    audit = history_pb.ListAuditRequest(owner_id="a", filter=history_pb.AuditFilter(origin=9))
    assert check_enums(audit).refused == [("filter.origin", 9)]


def test_unknown_enums_deep_in_repeated_and_recursive_messages_are_reset() -> None:
    call = content_pb2.ContentBlock(tool_call=content_pb2.ToolCallBlock(id="c", name="x"))
    call.tool_call.state = 42
    nested = content_pb2.ContentBlock(
        tool_result=content_pb2.ToolResultBlock(
            id="c", blocks=content_pb2.ContentBlocks(blocks=[call])
        )
    )
    message = message_pb2.Message(id="m", role=message_pb2.ROLE_USER, content=[nested])
    message.kind = 9
    request = history_pb.AppendMessagesRequest(thread_id="t", messages=[message])

    found = check_enums(request)

    assert found.refused == []
    assert sorted(found.reset) == [
        "messages[0].content[0].tool_result.blocks.blocks[0].tool_call.state",
        "messages[0].kind",
    ]
    stored = request.messages[0]
    assert stored.kind == message_pb2.MESSAGE_KIND_UNSPECIFIED
    assert stored.content[0].tool_result.blocks.blocks[0].tool_call.state == 0
    assert stored.role == message_pb2.ROLE_USER


def test_known_values_are_left_alone() -> None:
    request = history_pb.ListHistoryRequest(thread_id="t", direction=history_pb.DIRECTION_BACKWARD)
    found = check_enums(request)
    assert (found.refused, found.reset) == ([], [])
    assert request.direction == history_pb.DIRECTION_BACKWARD


def test_unknown_choices_are_reported_in_field_number_order() -> None:
    # The interceptor names the first refused value in its INVALID_ARGUMENT.
    profile = execution_profile_pb2.ExecutionProfile(name="p")
    profile.tool_policy.mode = 99
    request = orchestrator_pb.StartRunRequest(run_id="r", profile=profile)
    request.multitask_strategy = 98
    by_number = sorted(
        [("multitask_strategy", 98), ("profile.tool_policy.mode", 99)],
        key=lambda found: request.DESCRIPTOR.fields_by_name[found[0].split(".")[0]].number,
    )
    assert check_enums(request).refused == by_number
