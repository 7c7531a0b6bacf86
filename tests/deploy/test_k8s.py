"""deploy/k8s: valid against the Kubernetes schemas (offline), and the invariants a reviewer
checks."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from shared.server import LIVENESS
from shared.settings import DEFAULT_PORTS, GRPC_SERVICES, Settings
from shared.version import VERSION
from tests.deploy.manifests import (
    ALL_SERVICES,
    AUTOSCALED,
    BASE,
    DEPLOY,
    GROUPED,
    K8S_VERSIONS,
    OVERLAY,
    PRESTOP_SLEEP_SECONDS,
    SECRET_NAME,
    SECRET_SETTINGS,
    TABLE_OWNERS,
    Doc,
    base_resource_docs,
    config_env,
    env_of,
    kustomization,
    load_docs,
    of_kind,
    pod_specs,
    render,
    validate_k8s,
)

RENDERED = {"base": BASE, "overlay": OVERLAY}


def test_every_yaml_file_under_deploy_parses() -> None:
    files = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
    assert len(files) >= 10
    for path in files:
        assert load_docs(path), f"{path} is empty"


def test_every_base_resource_file_is_valid_kubernetes() -> None:
    docs = base_resource_docs()
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "PodDisruptionBudget"}
    for doc in docs:
        validate_k8s(doc)


@pytest.mark.parametrize("which", sorted(RENDERED))
def test_rendered_kustomization_is_valid_kubernetes(which: str) -> None:
    for doc in render(RENDERED[which]):
        validate_k8s(doc)


def test_example_secret_is_valid_and_holds_every_key_the_pods_read() -> None:
    (secret,) = load_docs(OVERLAY / "secret.example.yaml")
    validate_k8s(secret)
    assert secret["metadata"]["name"] == SECRET_NAME
    read = {
        e["valueFrom"]["secretKeyRef"]["key"]
        for _, spec in pod_specs(render(OVERLAY))
        for c in spec["containers"]
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert read == set(secret["stringData"])


def test_schema_validation_rejects_a_misspelled_field() -> None:
    deployment = copy.deepcopy(of_kind(base_resource_docs(), "Deployment")["history"])
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbes"] = container.pop("readinessProbe")
    with pytest.raises(jsonschema.ValidationError):
        validate_k8s(deployment)
    # The library's own entry point agrees (the fast path above only caches its schemas).
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[0], strict=True)
    valid = of_kind(base_resource_docs(), "Deployment")["history"]
    kubernetes_validate.validate(valid, K8S_VERSIONS[0], strict=True)


@pytest.mark.parametrize("directory", [BASE, OVERLAY], ids=["base", "overlay"])
def test_kustomization_lists_only_existing_files(directory: Path) -> None:
    k = kustomization(directory)
    paths = [*k.get("resources", []), *(p["path"] for p in k.get("patches", []) if "path" in p)]
    for generator in k.get("configMapGenerator", []):
        paths += generator.get("envs", []) + generator.get("files", [])
    for rel in paths:
        assert (directory / rel).exists(), f"{directory}/kustomization.yaml lists missing {rel}"


def test_every_manifest_file_is_used_by_a_kustomization() -> None:
    listed = set()
    for directory in (BASE, OVERLAY, GROUPED):
        k = kustomization(directory)
        listed |= {(directory / r).resolve() for r in k.get("resources", [])}
        listed |= {(directory / p["path"]).resolve() for p in k.get("patches", []) if "path" in p}
    on_disk = {
        p.resolve() for p in (DEPLOY / "k8s").rglob("*.yaml") if p.name != "kustomization.yaml"
    }
    # The example Secret is documentation: applying the overlay must not write placeholders.
    assert on_disk - listed == {(OVERLAY / "secret.example.yaml").resolve()}


def test_overlay_patches_and_replicas_target_objects_of_the_base() -> None:
    k = kustomization(OVERLAY)
    base = {(d["kind"], d["metadata"]["name"]) for d in base_resource_docs()}
    for patch in k["patches"]:
        for doc in load_docs(OVERLAY / patch["path"]):
            assert (doc["kind"], doc["metadata"]["name"]) in base, f"{patch['path']}: {doc['kind']}"
    deployments = of_kind(base_resource_docs(), "Deployment")
    for replica in k["replicas"]:
        assert replica["name"] in deployments
        # An HPA owns the count of an autoscaled Deployment; a fixed count would fight it.
        assert replica["name"] not in AUTOSCALED
    merged = {g["name"] for g in k["configMapGenerator"] if g.get("behavior") == "merge"}
    assert merged == {g["name"] for g in kustomization(BASE)["configMapGenerator"]}


def test_overlay_sets_namespace_image_tag_and_replicas() -> None:
    docs = render(OVERLAY)
    namespace = kustomization(OVERLAY)["namespace"]
    assert of_kind(docs, "Namespace").keys() == {namespace}
    assert all(d["metadata"]["namespace"] == namespace for d in docs if d["kind"] != "Namespace")
    images = {c["image"] for _, spec in pod_specs(docs) for c in spec["containers"]}
    assert images == {"registry.example.com/agentmesh:0.1.0"}
    deployments = of_kind(docs, "Deployment")
    assert deployments["history"]["spec"]["replicas"] == 3


def test_overlay_addresses_are_fully_qualified_in_its_namespace() -> None:
    docs = render(OVERLAY)
    namespace = kustomization(OVERLAY)["namespace"]
    (config,) = of_kind(docs, "ConfigMap").values()
    for name in GRPC_SERVICES:
        assert config["data"][f"AGENTMESH_{name.upper()}_ADDR"] == (
            f"dns:///{name}.{namespace}.svc.cluster.local:{DEFAULT_PORTS[name]}"
        )


def test_base_image_tag_is_the_release_version() -> None:
    images = {c["image"] for _, spec in pod_specs(render(BASE)) for c in spec["containers"]}
    assert images == {f"agentmesh:{VERSION}"}


@pytest.mark.parametrize("which", sorted(RENDERED))
def test_every_service_has_deployment_service_and_disruption_budget(which: str) -> None:
    docs = render(RENDERED[which])
    for kind in ("Deployment", "Service", "PodDisruptionBudget"):
        assert set(of_kind(docs, kind)) == set(ALL_SERVICES), kind
    for name, pdb in of_kind(docs, "PodDisruptionBudget").items():
        assert pdb["spec"]["selector"] == of_kind(docs, "Deployment")[name]["spec"]["selector"]


def test_each_deployment_runs_its_service_on_its_port() -> None:
    for name, deployment in of_kind(render(OVERLAY), "Deployment").items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["python", "-m", f"services.{name}"]
        env = env_of(container)
        assert env["SERVICE"]["value"] == name
        assert env["AGENTMESH_PORT"]["value"] == str(DEFAULT_PORTS[name])
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        expected = {"grpc" if name in GRPC_SERVICES else "http": DEFAULT_PORTS[name]}
        if name in GRPC_SERVICES:
            expected["metrics"] = 9464  # AGENTMESH_METRICS_PORT in config.env
        assert ports == expected, name


def test_grpc_services_serve_metrics_on_the_configured_port() -> None:
    config = dict(
        line.split("=", 1) for line in (BASE / "config.env").read_text().splitlines() if "=" in line
    )
    assert config["AGENTMESH_METRICS_PORT"] == "9464"


def test_grpc_deployments_probe_standard_grpc_health() -> None:
    deployments = of_kind(render(OVERLAY), "Deployment")
    for name in GRPC_SERVICES:
        (container,) = deployments[name]["spec"]["template"]["spec"]["containers"]
        for probe in ("startupProbe", "readinessProbe"):
            assert container[probe]["grpc"] == {"port": DEFAULT_PORTS[name]}, (name, probe)
        # Liveness asks the entry that stays SERVING while a store is lost (shared.server).
        assert container["livenessProbe"]["grpc"] == {
            "port": DEFAULT_PORTS[name],
            "service": LIVENESS,
        }, name


def test_gateway_probes_liveness_on_healthz_and_readiness_on_readyz() -> None:
    (container,) = of_kind(render(OVERLAY), "Deployment")["gateway"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["ports"][0]["name"] == "http"


@pytest.mark.parametrize("which", sorted(RENDERED))
def test_every_pod_runs_non_root_read_only_without_privileges(which: str) -> None:
    specs = dict(pod_specs(render(RENDERED[which])))
    assert len(specs) == len(ALL_SERVICES) + len(TABLE_OWNERS)
    for where, spec in specs.items():
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["runAsUser"] > 0, where
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert spec["automountServiceAccountToken"] is False, where
        tmp_volumes = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["runAsNonRoot"] is True, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            assert mounts.get("/tmp") in tmp_volumes, f"{where}: /tmp must be a writable emptyDir"


@pytest.mark.parametrize("which", sorted(RENDERED))
def test_every_container_has_resource_requests_and_limits(which: str) -> None:
    for where, spec in pod_specs(render(RENDERED[which])):
        for c in spec["containers"]:
            for bound in ("requests", "limits"):
                assert set(c["resources"][bound]) == {"cpu", "memory"}, (where, bound)


def test_termination_grace_outlasts_the_prestop_sleep_and_the_drain_grace() -> None:
    drain = float(config_env()["AGENTMESH_GRACE_SECONDS"])
    for name, deployment in of_kind(render(OVERLAY), "Deployment").items():
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        assert container["lifecycle"]["preStop"]["exec"]["command"] == [
            "sleep",
            str(PRESTOP_SLEEP_SECONDS),
        ], name
        assert spec["terminationGracePeriodSeconds"] > PRESTOP_SLEEP_SECONDS + drain, name


def test_rollouts_never_take_a_ready_pod_away_first() -> None:
    for name, deployment in of_kind(render(OVERLAY), "Deployment").items():
        assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0, name


def test_grpc_services_are_headless_and_the_gateway_service_is_not() -> None:
    services = of_kind(render(OVERLAY), "Service")
    deployments = of_kind(render(OVERLAY), "Deployment")
    for name, service in services.items():
        selector = deployments[name]["spec"]["selector"]["matchLabels"]
        assert service["spec"]["selector"] == selector, name
        if name == "gateway":
            assert service["spec"].get("clusterIP") != "None"
            continue
        assert service["spec"]["clusterIP"] == "None", name
        # Headless: clients dial pod IPs on the Service's port, so it must be the pod's port.
        assert [p["port"] for p in service["spec"]["ports"]] == [DEFAULT_PORTS[name]], name


def test_service_selectors_never_match_migration_pods() -> None:
    docs = render(OVERLAY)
    for job in of_kind(docs, "Job").values():
        labels = job["spec"]["template"]["metadata"]["labels"]
        for kind in ("Service", "PodDisruptionBudget"):
            for name, obj in of_kind(docs, kind).items():
                selector = obj["spec"]["selector"]
                selector = selector.get("matchLabels", selector)
                assert not selector.items() <= labels.items(), f"{kind}/{name} selects a Job's pods"


def test_autoscalers_scale_gateway_orchestrator_and_executor_deployments() -> None:
    docs = render(OVERLAY)
    hpas = of_kind(docs, "HorizontalPodAutoscaler")
    assert set(hpas) == set(AUTOSCALED)
    deployments = of_kind(docs, "Deployment")
    for name, hpa in hpas.items():
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert hpa["spec"]["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": name,
        }
        assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
        assert "replicas" not in deployments[name]["spec"], f"{name}: the HPA owns replicas"


def test_each_table_owner_has_a_migration_job_that_runs_migrate() -> None:
    jobs = of_kind(render(OVERLAY), "Job")
    assert set(jobs) == {f"{name}-migrate" for name in TABLE_OWNERS}
    for name in TABLE_OWNERS:
        spec = jobs[f"{name}-migrate"]["spec"]["template"]["spec"]
        assert spec["restartPolicy"] == "Never"
        (container,) = spec["containers"]
        assert container["command"] == ["python", "-m", f"services.{name}", "migrate"]
        assert "secretKeyRef" in env_of(container)["AGENTMESH_DATABASE_URL"]["valueFrom"]


def test_config_holds_only_known_non_secret_settings() -> None:
    known = {f"AGENTMESH_{field.upper()}" for field in Settings.model_fields}
    config = config_env()
    assert set(config) <= known, set(config) - known
    assert not set(config) & set(SECRET_SETTINGS)
    assert config["AGENTMESH_HOST"] == "0.0.0.0"
    for name in GRPC_SERVICES:
        assert config[f"AGENTMESH_{name.upper()}_ADDR"] == f"dns:///{name}:{DEFAULT_PORTS[name]}"


def test_base_has_no_secret_and_reads_credentials_only_from_the_secret() -> None:
    docs = render(BASE)
    assert not of_kind(docs, "Secret")
    for text in (BASE / name for name in kustomization(BASE)["resources"]):
        assert "kind: Secret" not in text.read_text()
    for where, spec in pod_specs(docs):
        for c in spec["containers"]:
            (source,) = c["envFrom"]
            assert source["configMapRef"]["name"].startswith("agentmesh-config"), where
            for name, entry in env_of(c).items():
                if name in SECRET_SETTINGS:
                    assert "value" not in entry, f"{where}: {name} is a literal"
                    assert entry["valueFrom"]["secretKeyRef"]["name"] == SECRET_NAME


def test_each_pod_gets_only_the_credentials_it_uses() -> None:
    expected = {
        # Page tokens are HMAC'd with AGENTMESH_PAGE_TOKEN_SECRET: every replica has it.
        "history": {"AGENTMESH_DATABASE_URL", "AGENTMESH_PAGE_TOKEN_SECRET"},
        "memory": {"AGENTMESH_DATABASE_URL", "AGENTMESH_PAGE_TOKEN_SECRET"},
        "scheduler": {"AGENTMESH_DATABASE_URL", "AGENTMESH_PAGE_TOKEN_SECRET"},
        "orchestrator": {"AGENTMESH_EVENT_LOG_URL"},
        # Its own schema (quota overrides, usage, API keys) and the quota counters on Redis.
        "gateway": {"AGENTMESH_JWT_SECRET", "AGENTMESH_DATABASE_URL", "AGENTMESH_EVENT_LOG_URL"},
        "router": set(),
        "executor": set(),
    }
    for name, deployment in of_kind(render(OVERLAY), "Deployment").items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert set(env_of(container)) & set(SECRET_SETTINGS) == expected[name], name


def test_yaml_keys_are_not_duplicated() -> None:
    # PyYAML keeps the last of two equal keys silently; a duplicate hides an edit.
    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader: Strict, node: yaml.MappingNode) -> dict[object, object]:
        keys = [k.value for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
        dupes = {k for k in keys if keys.count(k) > 1}
        assert not dupes, f"duplicate keys {dupes} at {node.start_mark}"
        return loader.construct_mapping(node)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    for path in DEPLOY.rglob("*.yaml"):
        with path.open() as f:
            list(yaml.load_all(f, Loader=Strict))


def _selected(docs: tuple[Doc, ...], **wanted: tuple[str, ...] | str) -> set[str]:
    """kind/name of objects whose labels match, like `kubectl apply -l` (a tuple = `in (...)`,
    a string starting with ! = `!=`)."""
    chosen = set()
    for d in docs:
        labels = d["metadata"].get("labels", {})
        ok = True
        for key, value in wanted.items():
            label = labels.get(f"app.kubernetes.io/{key}")
            if isinstance(value, tuple):
                ok &= label in value
            elif value.startswith("!"):
                ok &= label != value[1:]
            else:
                ok &= label == value
        if ok:
            chosen.add(f"{d['kind']}/{d['metadata']['name']}")
    return chosen


def test_readme_selectors_apply_config_and_jobs_first_then_one_service() -> None:
    docs = render(OVERLAY)
    (config_name,) = of_kind(docs, "ConfigMap")
    first = _selected(docs, component=("config", "migration"))
    assert first == {f"ConfigMap/{config_name}"} | {f"Job/{n}-migrate" for n in TABLE_OWNERS}
    assert _selected(docs, name="history", component="migration") == {"Job/history-migrate"}
    assert _selected(docs, name="history", component="!migration") == {
        "Deployment/history",
        "Service/history",
        "PodDisruptionBudget/history",
    }
    assert _selected(docs, name="gateway", component="!migration") >= {
        "HorizontalPodAutoscaler/gateway"
    }
    readme = (DEPLOY / "README.md").read_text()
    assert "-l 'app.kubernetes.io/component in (config,migration)'" in readme
    assert "-l app.kubernetes.io/name=history,app.kubernetes.io/component!=migration" in readme
    assert "docker build -f deploy/Dockerfile" in readme
