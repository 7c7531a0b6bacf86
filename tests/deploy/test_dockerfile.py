"""deploy/Dockerfile, checked statically (no container engine runs here)."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet

from tests.deploy.manifests import DEPLOY, ROOT

DOCKERFILE = (DEPLOY / "Dockerfile").read_text()
# BuildKit reads <Dockerfile>.dockerignore (beside the Dockerfile) before a root .dockerignore.
DOCKERIGNORE = (DEPLOY / "Dockerfile.dockerignore").read_text()
BUILD_TOOLS = ("gcc", "g++", "build-essential", "make ", "apt-get", "apk ", "cc ")


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    lines = [ln.strip() for ln in joined.splitlines()]
    return [
        (ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "")
        for ln in lines
        if ln and not ln.startswith("#")
    ]


def _global_args() -> dict[str, str]:
    values = {}
    for kw, rest in _instructions(DOCKERFILE):
        if kw == "FROM":
            break
        if kw == "ARG" and "=" in rest:
            key, value = rest.split("=", 1)
            values[key] = value
    return values


def _stages() -> list[Stage]:
    stages: list[Stage] = []
    args = _global_args()
    for kw, rest in _instructions(DOCKERFILE):
        if kw == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], parts[0])
            stages.append(Stage(base=base, name=parts[2] if len(parts) > 2 else ""))
        elif stages:
            stages[-1].instructions.append((kw, rest))
    return stages


def _stage_arg(stage: Stage, name: str) -> str:
    for rest in stage.args("ARG"):
        if rest.startswith(f"{name}="):
            return rest.split("=", 1)[1]
    raise AssertionError(f"ARG {name} has no default in stage {stage.name}")


def test_image_is_multi_stage_on_python_slim_matching_the_project() -> None:
    stages = _stages()
    assert [s.name for s in stages] == ["builder", "runtime"]
    assert {s.base for s in stages} == {"python:3.11-slim"}
    with (ROOT / "pyproject.toml").open("rb") as f:
        requires = SpecifierSet(tomllib.load(f)["project"]["requires-python"])
    assert "3.11" in requires


def test_builder_installs_the_pinned_dependencies_as_wheels_into_a_venv() -> None:
    builder = _stages()[0]
    assert "pyproject.toml ./" in builder.args("COPY")
    runs = " ".join(builder.args("RUN"))
    assert "python -m venv /opt/venv" in runs
    assert "/opt/venv/bin/pip install --only-binary=:all: ." in runs


def test_final_stage_copies_only_the_venv_and_the_source_folders() -> None:
    runtime = _stages()[-1]
    assert runtime.args("COPY") == [
        "--from=builder /opt/venv /opt/venv",
        "shared/ /app/shared/",
        "services/ /app/services/",
        "protos/ /app/protos/",
    ]


def test_final_stage_has_no_build_tools() -> None:
    runtime = _stages()[-1]
    for kw, rest in runtime.instructions:
        if kw == "RUN":
            assert not any(tool in f"{rest} " for tool in BUILD_TOOLS), rest
            assert "pip install" not in rest, rest


def test_final_stage_runs_as_a_fixed_non_root_uid() -> None:
    runtime = _stages()[-1]
    (user,) = runtime.args("USER")
    uid = _stage_arg(runtime, "APP_UID")
    assert user == "${APP_UID}:${APP_UID}"
    assert int(uid) >= 10000
    # The Kubernetes manifests pin the same uid (runAsUser).
    assert f"runAsUser: {uid}" in (DEPLOY / "k8s" / "base" / "history.yaml").read_text()
    # USER comes after everything that needs root.
    keywords = [kw for kw, _ in runtime.instructions]
    assert "RUN" not in keywords[keywords.index("USER") :]


def test_final_stage_sets_the_import_path_and_container_defaults() -> None:
    env = " ".join(_stages()[-1].args("ENV"))
    for setting in (
        "PYTHONPATH=/app:/app/protos",
        "PATH=/opt/venv/bin:${PATH}",
        "PYTHONDONTWRITEBYTECODE=1",
        "AGENTMESH_HOST=0.0.0.0",
    ):
        assert setting in env


def test_health_check_uses_the_probe_for_the_configured_service() -> None:
    (check,) = _stages()[-1].args("HEALTHCHECK")
    assert 'CMD ["python", "-m", "services.probe", "--self"' in check
    assert (ROOT / "services" / "probe.py").exists()


def test_dockerignore_lets_through_exactly_what_the_image_copies() -> None:
    lines = [ln.strip() for ln in DOCKERIGNORE.splitlines()]
    patterns = [ln for ln in lines if ln and not ln.startswith("#")]

    def ignored(path: str) -> bool:
        result = False
        for pattern in patterns:
            negate = pattern.startswith("!")
            body = pattern[1:] if negate else pattern
            folder = body if body.endswith("/") else f"{body}/"
            if fnmatch.fnmatch(path, body.rstrip("/")) or path.startswith(folder):
                result = not negate
        return result

    for source in ("pyproject.toml", "shared", "services", "protos"):
        assert not ignored(source), source
    for junk in (".venv", ".git", "data", "tests", "tools", "bench"):
        assert ignored(junk), junk
