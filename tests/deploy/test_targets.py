"""`python -m services --target`: which services a process hosts, and where each listens."""

from __future__ import annotations

import pytest

from services.targets import ALL_TARGETS, grpc_port, label, main, parse_targets
from shared.settings import DEFAULT_PORTS, Settings


def test_all_names_every_service_in_start_order() -> None:
    assert parse_targets("all") == ALL_TARGETS
    assert ALL_TARGETS.index("history") < ALL_TARGETS.index("orchestrator")
    assert ALL_TARGETS[-1] == "gateway"
    assert label(parse_targets("all")) == "all"


def test_a_list_is_deduplicated_and_put_in_start_order() -> None:
    targets = parse_targets(" orchestrator,router , executor,router")
    assert targets == ("router", "executor", "orchestrator")
    assert label(targets) == "router,executor,orchestrator"


@pytest.mark.parametrize("value", ["", " , ", "history,historian", "ALL"])
def test_a_bad_target_is_refused_naming_the_option(value: str) -> None:
    with pytest.raises(ValueError, match="--target"):
        parse_targets(value)


def test_the_command_line_refuses_an_unknown_target(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--target", "history,nope"])
    assert exited.value.code == 2
    assert "unknown service 'nope'" in capsys.readouterr().err


def test_a_lone_service_listens_on_agentmesh_port_as_its_own_module_does() -> None:
    settings = Settings(port=6000)
    assert grpc_port(settings, "history", ("history",)) == 6000


def test_a_grouped_service_listens_on_the_port_of_its_own_address() -> None:
    settings = Settings(
        port=7000,
        router_addr="dns:///core.agentmesh.svc.cluster.local:6052",
        executor_addr="127.0.0.1:6053",
    )
    group = ("router", "executor", "orchestrator", "gateway")
    assert grpc_port(settings, "router", group) == 6052
    assert grpc_port(settings, "executor", group) == 6053
    assert grpc_port(settings, "orchestrator", group) == DEFAULT_PORTS["orchestrator"]
