"""The README stays a README, the documents under docs/ hold the rest: every setting is in
docs/configuration.md, and every link between them resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
# The README and the documents it sends readers to (docs/protocols/ has its own owners).
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_setting_is_in_the_configuration_table() -> None:
    missing = [
        f"AGENTMESH_{name.upper()}"
        for name in Settings.model_fields
        if f"`AGENTMESH_{name.upper()}`" not in CONFIGURATION
    ]
    assert not missing, f"document these in docs/configuration.md: {missing}"


def test_every_service_setting_is_in_the_configuration_table() -> None:
    from services.executor.config import ExecutorConfig
    from services.orchestrator.service import RunSettings
    from services.scheduler.settings import SchedulerSettings

    missing = [
        f"{cls.model_config['env_prefix']}{name}".upper()
        for cls in (ExecutorConfig, RunSettings, SchedulerSettings)
        for name in cls.model_fields
        if f"`{cls.model_config['env_prefix']}{name}`".upper() not in CONFIGURATION
    ]
    assert not missing, f"document these in docs/configuration.md: {missing}"


def test_readme_shows_the_two_commands() -> None:
    assert "make run" in README and "make test" in README


def test_readme_is_a_readme_not_a_manual() -> None:
    assert len(README.splitlines()) < 250, "move the details into docs/"


def _anchors(text: str) -> set[str]:
    """GitHub's ids of a document's headings: lower case, punctuation dropped, spaces as -."""
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


def _in_code(text: str) -> str:
    """The text without its fenced code blocks (a `# comment` there is no heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_of_the_document_resolves(document: Path) -> None:
    text = _in_code(document.read_text())
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"(https?|mailto):", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md":
            if anchor not in _anchors(_in_code(linked.read_text())):
                broken.append(target)
    assert not broken, f"{document.relative_to(ROOT)}: links that lead nowhere: {broken}"
