"""What the deploy tests read: the files under deploy/, parsed, and the kustomizations
rendered offline."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

from shared.settings import GRPC_SERVICES

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "k8s" / "base"
OVERLAY = DEPLOY / "k8s" / "overlays" / "example"
# The example with grouped targets (orchestrator, router, executor in one Deployment).
GROUPED = DEPLOY / "k8s" / "overlays" / "grouped"

ALL_SERVICES = (*GRPC_SERVICES, "gateway")
TABLE_OWNERS = ("history", "memory", "scheduler")
AUTOSCALED = ("gateway", "orchestrator", "executor")
# Who calls whom (ARCHITECTURE.md §1): a caller starts after its peers are healthy.
CALLS = {
    "gateway": ("orchestrator", "history", "memory", "scheduler"),
    "orchestrator": ("history", "router", "executor"),
    "executor": ("memory",),
    "scheduler": ("orchestrator",),
}
# Settings that carry credentials: only ever from a Secret.
SECRET_SETTINGS = (
    "AGENTMESH_DATABASE_URL",
    "AGENTMESH_EVENT_LOG_URL",
    "AGENTMESH_JWT_SECRET",
    "AGENTMESH_PAGE_TOKEN_SECRET",
)
SECRET_NAME = "agentmesh-secrets"
PRESTOP_SLEEP_SECONDS = 5

Doc = dict[str, Any]
# libyaml's parser when PyYAML has it: the rendered manifests are long.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_docs(path: Path) -> list[Doc]:
    with path.open() as f:
        return [d for d in yaml.load_all(f, Loader=_Loader) if d is not None]


def kustomization(directory: Path) -> Doc:
    (doc,) = load_docs(directory / "kustomization.yaml")
    return doc


@cache
def render(directory: Path) -> tuple[Doc, ...]:
    """`kubectl kustomize` output (kubectl ships kustomize; the machine image has kubectl)."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is needed to render deploy/k8s"
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.load_all(out.stdout, Loader=_Loader) if d is not None)


@cache
def base_resource_docs() -> tuple[Doc, ...]:
    """The base's resource files, file by file (no kustomize involved)."""
    return tuple(d for name in kustomization(BASE)["resources"] for d in load_docs(BASE / name))


def of_kind(docs: tuple[Doc, ...] | list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_specs(docs: tuple[Doc, ...] | list[Doc]) -> Iterator[tuple[str, Doc]]:
    """(kind/name, pod spec) of every Deployment and Job."""
    for d in docs:
        if d["kind"] in ("Deployment", "Job"):
            yield f"{d['kind']}/{d['metadata']['name']}", d["spec"]["template"]["spec"]


def env_of(container: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in container.get("env", [])}


def config_env() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (BASE / "config.env").read_text().splitlines() if line)
    return dict(pairs)


# The oldest Kubernetes the manifests support (native gRPC probes are GA since 1.27) and the
# newest whose schemas kubernetes-validate ships.
K8S_VERSIONS = ("1.29", kv_utils.latest_version())


@cache
def _schema_validator(kind: str, api_version: str, k8s_version: str) -> jsonschema.Validator:
    """kubernetes_validate.validate()'s lookup of the strict schema (offline, shipped in the
    package), compiled once per kind: the library reloads and recompiles it on every call."""
    version = [
        v
        for v in kv_utils.all_versions()
        if kv_utils.major_minor(v) <= kv_utils.major_minor(k8s_version)
    ][-1]
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    # A kind without a schema raises here: unknown kinds fail instead of passing silently.
    schema = kv_utils.schema_contents(f"{folder}/{kind.lower()}-{group_version}.json", version)
    definitions = kv_utils.schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate_k8s(doc: Doc) -> None:
    """Raises jsonschema.ValidationError unless `doc` is valid for every K8S_VERSIONS (strict:
    unknown fields, i.e. typos, are errors too)."""
    for version in K8S_VERSIONS:
        _schema_validator(doc["kind"], doc["apiVersion"], version).validate(doc)
