"""deploy/compose.yaml: every service, a health-gated start order, and settings as the
services read them."""

from __future__ import annotations

import re
from graphlib import TopologicalSorter
from typing import Any

from shared.settings import DEFAULT_PORTS, GRPC_SERVICES, Settings
from tests.deploy.manifests import (
    ALL_SERVICES,
    CALLS,
    DEPLOY,
    SECRET_SETTINGS,
    TABLE_OWNERS,
    load_docs,
)

(COMPOSE,) = load_docs(DEPLOY / "compose.yaml")
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
GATED = ("service_healthy", "service_completed_successfully")


def _depends(name: str) -> dict[str, str]:
    entries = SERVICES[name].get("depends_on", {})
    assert isinstance(entries, dict), f"{name}: depends_on needs conditions (long syntax)"
    return {dep: spec["condition"] for dep, spec in entries.items()}


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, duration
    return float(match.group(1))


def test_compose_has_backends_migrations_and_every_service() -> None:
    migrations = {f"{name}-migrate" for name in TABLE_OWNERS}
    assert set(SERVICES) == {"postgres", "redis", *migrations, *ALL_SERVICES}


def test_every_dependency_waits_for_health_or_successful_completion() -> None:
    for name in SERVICES:
        for dep, condition in _depends(name).items():
            assert dep in SERVICES, f"{name} depends on unknown {dep}"
            assert condition in GATED, f"{name} -> {dep}: {condition}"
            migration = dep.endswith("-migrate")
            wanted = "service_completed_successfully" if migration else "service_healthy"
            assert condition == wanted, f"{name} -> {dep}: {condition}"


def test_everything_a_container_waits_on_has_a_health_check_or_exits() -> None:
    for name in SERVICES:
        for dep, condition in _depends(name).items():
            if condition == "service_healthy":
                assert SERVICES[dep]["healthcheck"]["test"], f"{dep} has no health check"
            else:
                assert SERVICES[dep]["restart"] == "no", f"{dep} must run once and exit"


def test_migrations_run_after_postgres_and_before_their_service() -> None:
    for name in TABLE_OWNERS:
        migration = SERVICES[f"{name}-migrate"]
        assert migration["command"] == ["python", "-m", f"services.{name}", "migrate"]
        assert _depends(f"{name}-migrate") == {"postgres": "service_healthy"}
        assert _depends(name)[f"{name}-migrate"] == "service_completed_successfully"


def test_callers_start_after_the_peers_they_call_are_healthy() -> None:
    for caller, peers in CALLS.items():
        depends = _depends(caller)
        for peer in peers:
            assert depends.get(peer) == "service_healthy", f"{caller} -> {peer}"
    assert _depends("orchestrator")["redis"] == "service_healthy"


def test_start_order_has_no_cycle() -> None:
    order = list(TopologicalSorter({n: set(_depends(n)) for n in SERVICES}).static_order())
    assert order.index("postgres") < order.index("history-migrate") < order.index("history")
    assert order[-1] == "gateway"


def test_every_service_runs_its_module_with_a_probe_health_check() -> None:
    for name in ALL_SERVICES:
        service = SERVICES[name]
        assert service["command"] == ["python", "-m", f"services.{name}"]
        assert service["environment"]["SERVICE"] == name
        assert service["healthcheck"]["test"][:4] == ["CMD", "python", "-m", "services.probe"]
        assert "--self" in service["healthcheck"]["test"]


def test_containers_are_locked_down_and_drain_before_being_killed() -> None:
    grace = float(SERVICES["history"]["environment"]["AGENTMESH_GRACE_SECONDS"])
    for name in [*ALL_SERVICES, *(f"{n}-migrate" for n in TABLE_OWNERS)]:
        service = SERVICES[name]
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp"], name
        assert service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}, name
        assert _seconds(service["stop_grace_period"]) > grace, name


def test_environment_names_real_settings_and_dns_targets() -> None:
    known = {f"AGENTMESH_{field.upper()}" for field in Settings.model_fields}
    for name in ALL_SERVICES:
        env = SERVICES[name]["environment"]
        assert {k for k in env if k.startswith("AGENTMESH_")} <= known, name
        assert env["AGENTMESH_HOST"] == "0.0.0.0"
        assert env["AGENTMESH_DATABASE_URL"].startswith("postgresql://")
        assert env["AGENTMESH_EVENT_LOG_URL"].startswith("redis://redis:6379/")
        for peer in GRPC_SERVICES:
            assert env[f"AGENTMESH_{peer.upper()}_ADDR"] == f"dns:///{peer}:{DEFAULT_PORTS[peer]}"


def test_secrets_are_interpolated_never_literal() -> None:
    env = SERVICES["gateway"]["environment"]
    # ${VAR:?message}: compose refuses to start without a real secret.
    for name in ("AGENTMESH_JWT_SECRET", "AGENTMESH_PAGE_TOKEN_SECRET"):
        assert re.fullmatch(rf"\$\{{{name}:\?[^}}]+\}}", env[name]), name
    assert set(SECRET_SETTINGS) <= set(env)


def test_only_the_gateway_is_published_and_only_on_loopback() -> None:
    published = {name: s["ports"] for name, s in SERVICES.items() if "ports" in s}
    port = DEFAULT_PORTS["gateway"]
    assert published == {"gateway": [f"127.0.0.1:{port}:{port}"]}
