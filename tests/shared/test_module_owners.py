"""Where modules live (STYLE.md): shared/ holds only what two or more services use, and its
modules import one another without a cycle. Read from the source's imports (function-local
ones included), not by importing it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Used by no service, only by tests and benchmarks: the message layer's type-aware streaming
# merge, which the worker does not call (it merges its turn's chunks itself).
NOT_A_SERVICE_MODULE = {"shared.model.merge"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in ("shared", "services"):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] != "__init__":
                found[".".join(parts)] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports among `modules` (`from a import b` counts a.b when it is one)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    named.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
        graph[name] = named & modules.keys()
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph[todo.pop()] - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


def test_every_shared_module_serves_two_or_more_services() -> None:
    modules = _modules()
    graph = _imports(modules)
    users: dict[str, set[str]] = {m: set() for m in modules if m.startswith("shared.")}
    for name in modules:
        parts = name.split(".")
        if parts[0] == "services" and len(parts) > 2:  # services/<service>/...
            for dep in _reachable(graph, name) & users.keys():
                users[dep].add(parts[1])
    one_or_none = {m: sorted(u) for m, u in users.items() if len(u) < 2}
    assert one_or_none.keys() == NOT_A_SERVICE_MODULE, (
        f"move each module into the service that uses it: {one_or_none}"
    )


def test_shared_modules_import_one_another_without_a_cycle() -> None:
    modules = {m: p for m, p in _modules().items() if m.startswith("shared.")}
    graph = _imports(modules)
    cycles = sorted(m for m in graph if m in _reachable(graph, m))
    assert cycles == []


def test_history_modules_import_one_another_without_a_cycle() -> None:
    # The two direct SQL layers once imported each other's private names; what they share
    # is services/history/direct.py.
    modules = {m: p for m, p in _modules().items() if m.startswith("services.history.")}
    graph = _imports(modules)
    cycles = sorted(m for m in graph if m in _reachable(graph, m))
    assert cycles == []


# History's rules, by aggregate, without I/O: unit tests reach them without a database.
HISTORY_RULES = ("core", "context", "runs", "audit", "deletions", "visibility")


def test_historys_rules_reach_no_store_unit_of_work_or_protobuf() -> None:
    modules = _modules()
    graph = _imports(modules)
    rules = {f"services.history.{name}" for name in HISTORY_RULES}
    for rule in sorted(rules):
        outside = sorted(
            m for m in _reachable(graph, rule) if m.startswith("services.") and m not in rules
        )
        assert outside == [], f"{rule} reaches {outside}"
        source = modules[rule].read_text(encoding="utf-8")
        for io in ("sqlalchemy", "grpc", "agentmesh."):
            assert f"import {io}" not in source and f"from {io}" not in source, (rule, io)
