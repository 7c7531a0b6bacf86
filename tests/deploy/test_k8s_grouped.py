"""deploy/k8s/overlays/grouped: orchestrator, router and executor as one Deployment
(`python -m services --target ...`), every service still reachable by its own name and port."""

from __future__ import annotations

from services.targets import parse_targets
from shared.settings import DEFAULT_PORTS
from tests.deploy.manifests import GROUPED, Doc, env_of, of_kind, render, validate_k8s

TOGETHER = ("router", "executor", "orchestrator")


def _docs() -> tuple[Doc, ...]:
    return render(GROUPED)


def _container(deployment: Doc) -> Doc:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _targets(container: Doc) -> tuple[str, ...]:
    command = container["command"]
    if command[:3] == ["python", "-m", "services"]:
        return parse_targets(command[command.index("--target") + 1])
    assert command[:2] == ["python", "-m"], command
    return (command[2].removeprefix("services."),)


def test_the_grouped_overlay_is_valid_kubernetes() -> None:
    for doc in _docs():
        validate_k8s(doc)


def test_one_deployment_hosts_the_grouped_targets_and_the_others_keep_their_own() -> None:
    deployments = of_kind(_docs(), "Deployment")
    hosted = {name: _targets(_container(d)) for name, d in deployments.items()}
    assert set(hosted["orchestrator"]) == set(TOGETHER)
    for name in ("router", "executor"):
        assert name not in deployments
    for name in ("gateway", "history", "memory", "scheduler"):
        assert hosted[name] == (name,)
    served = [s for targets in hosted.values() for s in targets]
    assert sorted(served) == sorted(set(served)), "a service hosted by two Deployments"
    assert set(served) == {*DEFAULT_PORTS}


def test_every_service_name_reaches_a_pod_listening_on_its_port() -> None:
    docs = _docs()
    deployments = of_kind(docs, "Deployment")
    for name, service in of_kind(docs, "Service").items():
        selector = service["spec"]["selector"]
        (pod,) = [
            d
            for d in deployments.values()
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        container = _container(pod)
        assert name in _targets(container), f"Service {name} selects pods not hosting it"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for port in service["spec"]["ports"]:
            assert ports[port["targetPort"]] == DEFAULT_PORTS[name], (name, port)


def test_a_process_of_several_targets_is_not_given_one_port() -> None:
    for deployment in of_kind(_docs(), "Deployment").values():
        container = _container(deployment)
        if len(_targets(container)) > 1:
            assert "AGENTMESH_PORT" not in env_of(container)


def test_the_grouped_pods_get_no_autoscaler_or_budget_of_a_service_they_replaced() -> None:
    docs = _docs()
    deployments = of_kind(docs, "Deployment")
    for kind in ("PodDisruptionBudget", "HorizontalPodAutoscaler"):
        for name in of_kind(docs, kind):
            assert name in deployments, f"{kind} {name} has no Deployment"
