"""The Helm chart, rendered by the real helm: lint, schema validity, RBAC scope, values plumbing."""
from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
import yaml

from hack import chart
from tests.support.kube_schemas import crd_schemas, problems

MANIFEST_CRDS = [chart.MANIFESTS_DIR / "crd.yaml", chart.MANIFESTS_DIR / "kopf-peering-crds.yaml"]

# Value sets the chart must render into valid objects; each exercises a different branch.
VALUE_SETS = {
    "default": (),
    "namespaced-peering": ("watchNamespaces={team-a,team-b}", "peering.enabled=true", "logLevel=DEBUG",
                           "trainerImage=registry.example/pets-trainer:1.2.3", "livenessPort=9090",
                           "metrics.port=9100",
                           "metrics.networkPolicyFrom[0].namespaceSelector.matchLabels.name=monitoring"),
    "cluster-rbac-for-namespaces": ("watchNamespaces={team-a}", "rbac.scope=cluster", "peering.enabled=true",
                                    "peering.name=pets-ha", "networkPolicy.enabled=false", "metrics.enabled=false"),
    "gang-scheduling": ("gangScheduling.enabled=true", "gangScheduling.schedulers={volcano}",
                        "gangScheduling.volcanoSchedulerName=volcano-batch", "watchNamespaces={team-a}"),
    "policy-allowing-more": ("policy.allowedImages={registry.example/ml/*,other:2}", "policy.hostPath.allowed=true",
                             "policy.hostPath.pathPrefixes={/mnt/datasets,/scratch}"),
    "policy-without-admission": ("policy.admission=false",),
    "bring-your-own-account": ("rbac.create=false", "serviceAccount.create=false", "serviceAccount.name=ops",
                               "replicas=0", "image.repository=registry.example/pets-operator", "image.tag=dev",
                               "image.pullPolicy=Always", "imagePullSecrets[0].name=regcred",
                               "nodeSelector.kubernetes\\.io/os=linux", "tolerations[0].operator=Exists",
                               "resources.requests.cpu=100m", "resources.limits.memory=512Mi",
                               "podAnnotations.team=ml", "priorityClassName=system-cluster-critical",
                               "namespace.create=true"),
}


def render(k8s_tools, *sets: str, include_crds: bool = False) -> list[dict]:
    return chart.documents(chart.template(k8s_tools.helm, sets=sets, include_crds=include_crds))


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [obj for obj in objects if obj["kind"] == kind]


def the(objects: list[dict], kind: str) -> dict:
    (found,) = by_kind(objects, kind)
    return found


def operator_env(objects: list[dict]) -> dict[str, str]:
    container = the(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item.get("value") for item in container["env"]}


LEADER_ELECTION_ROLE = "pets-operator-leader-election"


def job_roles(objects: list[dict]) -> list[dict]:
    """The Roles granting the operator its work on jobs (not the one for its leader-election Lease)."""
    return [role for role in by_kind(objects, "Role") if role["metadata"]["name"] != LEADER_ELECTION_ROLE]


def rule_set(role: dict) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_helm_lint_passes_with_default_and_other_values(k8s_tools, tmp_path):
    chart.helm(k8s_tools.helm, "lint", "--strict", str(chart.CHART_DIR))
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"watchNamespaces": ["team-a"], "peering": {"enabled": True}}))
    chart.helm(k8s_tools.helm, "lint", "--strict", str(chart.CHART_DIR), "--values", str(values))


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_rendered_object_is_valid_for_kubernetes(k8s_tools, name):
    objects = render(k8s_tools, *VALUE_SETS[name], include_crds=True)
    custom = crd_schemas(by_kind(objects, "CustomResourceDefinition"))
    assert by_kind(objects, "Deployment"), "the chart renders no Deployment"
    assert [p for obj in objects for p in problems(obj, custom)] == []


def test_chart_crds_are_the_manifest_files_byte_for_byte(k8s_tools, tmp_path):
    # Symlinks into manifests/ today; a generated copy would pass too, a drifted one never.
    chart_crds = sorted((chart.CHART_DIR / "crds").iterdir())
    assert sorted(path.read_bytes() for path in chart_crds) == sorted(path.read_bytes() for path in MANIFEST_CRDS)
    # What helm really ships: the packaged chart carries the same bytes.
    chart.helm(k8s_tools.helm, "package", str(chart.CHART_DIR), "--destination", str(tmp_path))
    (package,) = tmp_path.glob("pets-operator-*.tgz")
    with tarfile.open(package) as archive:
        packaged = {Path(member.name).name: archive.extractfile(member).read()
                    for member in archive.getmembers() if "/crds/" in member.name and member.isfile()}
    assert sorted(packaged.values()) == sorted(path.read_bytes() for path in MANIFEST_CRDS)


def test_include_crds_renders_the_manifest_crds(k8s_tools):
    rendered = by_kind(render(k8s_tools, include_crds=True), "CustomResourceDefinition")
    expected = [doc for path in MANIFEST_CRDS for doc in chart.documents(path.read_text())]
    key = lambda crd: crd["metadata"]["name"]  # noqa: E731
    assert sorted(rendered, key=key) == sorted(expected, key=key)
    assert {crd["metadata"]["name"] for crd in rendered} == {
        "petstrainingjobs.training.pets.dev", "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}


def test_default_install_is_cluster_wide_two_replicas_with_a_leader_and_locked_down(k8s_tools):
    objects = render(k8s_tools)
    assert {obj["kind"] for obj in objects} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                                                "RoleBinding", "Deployment", "NetworkPolicy", "Service", "ConfigMap",
                                                "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    env = operator_env(objects)
    assert env["PETS_OPERATOR_NAMESPACES"] == ""
    assert env["PETS_OPERATOR_PEERING"] == ""
    assert env["PETS_OPERATOR_LEADER_ELECT"] == "true"
    assert env["PETS_OPERATOR_TRAINER_IMAGE"] == "pets-trainer:0.1.0"
    assert env["PETS_OPERATOR_LOG_LEVEL"] == "INFO"
    assert env["PETS_OPERATOR_LIVENESS_PORT"] == "8080"
    assert env["PETS_OPERATOR_NETWORK_POLICY"] == "true"
    assert env["PETS_OPERATOR_METRICS_PORT"] == "8000"

    deployment = the(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2  # one leader, one standby
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == the(objects, "ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]
    assert container["image"] == "pets-operator:0.1.0"
    assert container["command"] == ["pets-operator", "run"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]}}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert container["ports"] == [{"name": "healthz", "containerPort": 8080, "protocol": "TCP"},
                                  {"name": "metrics", "containerPort": 8000, "protocol": "TCP"}]
    assert set(container["resources"]) == {"requests", "limits"}


def test_the_operator_pods_admit_ingress_only_to_their_metrics(k8s_tools):
    objects = render(k8s_tools)
    policy = the(objects, "NetworkPolicy")
    template = the(objects, "Deployment")["spec"]["template"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()  # it selects the operator's pods
    assert policy["metadata"]["namespace"] == "pets-operator"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]
    without_metrics = the(render(k8s_tools, "metrics.enabled=false"), "NetworkPolicy")
    assert "ingress" not in without_metrics["spec"]  # nothing admitted
    restricted = the(render(k8s_tools, *VALUE_SETS["namespaced-peering"]), "NetworkPolicy")
    assert restricted["spec"]["ingress"][0]["from"] == [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]


def test_metrics_service_and_optional_service_monitor(k8s_tools):
    objects = render(k8s_tools)
    service = the(objects, "Service")
    pod_labels = the(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["metadata"]["name"] == "pets-operator-metrics"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8000, "targetPort": "metrics", "protocol": "TCP"}]
    assert not by_kind(objects, "ServiceMonitor")

    monitored = render(k8s_tools, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom",
                       "metrics.serviceMonitor.interval=15s")
    monitor = the(monitored, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= the(monitored, "Service")["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s",
                                             "scrapeTimeout": "10s"}]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["pets-operator"]}

    off = render(k8s_tools, "metrics.enabled=false", "metrics.serviceMonitor.enabled=true")
    assert not by_kind(off, "Service") and not by_kind(off, "ServiceMonitor")
    assert operator_env(off)["PETS_OPERATOR_METRICS_PORT"] == "0"
    assert [p["name"] for p in the(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["ports"]] == ["healthz"]


def test_network_policies_can_be_turned_off(k8s_tools):
    for sets in (("networkPolicy.enabled=false",), ("networkPolicy.enabled=false", "watchNamespaces={team-a}")):
        objects = render(k8s_tools, *sets)
        assert not by_kind(objects, "NetworkPolicy")
        assert operator_env(objects)["PETS_OPERATOR_NETWORK_POLICY"] == "false"
        for role in by_kind(objects, "ClusterRole") + job_roles(objects):
            assert not [rule for rule in rule_set(role) if rule[0] == "networking.k8s.io"]
    for role in job_roles(render(k8s_tools, "watchNamespaces={team-a}")):
        assert ("networking.k8s.io", "networkpolicies", "create") in rule_set(role)


def test_cluster_role_binds_the_chart_s_service_account(k8s_tools):
    binding = the(render(k8s_tools), "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pets-operator", "namespace": "pets-operator"}]


def test_watched_namespaces_get_namespaced_roles_and_peering(k8s_tools):
    objects = render(k8s_tools, *VALUE_SETS["namespaced-peering"])
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "ClusterRoleBinding")
    roles = by_kind(objects, "Role")
    bindings = by_kind(objects, "RoleBinding")
    assert sorted(role["metadata"]["namespace"] for role in roles) == ["team-a", "team-b"]
    assert sorted(binding["metadata"]["namespace"] for binding in bindings) == ["team-a", "team-b"]
    for role in roles:
        rules = rule_set(role)
        assert {("kopf.dev", "kopfpeerings", verb) for verb in ("list", "watch", "patch")} <= rules
        assert not {rule for rule in rules if rule[0] == "apiextensions.k8s.io" or "clusterkopfpeerings" in rule}
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pets-operator", "namespace": "pets-operator"}]

    peerings = by_kind(objects, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]
    env = operator_env(objects)
    assert {p["metadata"]["name"] for p in peerings} == {env["PETS_OPERATOR_PEERING"]} == {"pets-operator"}
    assert env["PETS_OPERATOR_NAMESPACES"] == "team-a,team-b"
    assert env["PETS_OPERATOR_LOG_LEVEL"] == "DEBUG"
    assert env["PETS_OPERATOR_TRAINER_IMAGE"] == "registry.example/pets-trainer:1.2.3"
    assert env["PETS_OPERATOR_LIVENESS_PORT"] == "9090"
    container = the(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == 9090
    assert the(objects, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"


def test_cluster_scope_with_watched_namespaces_keeps_namespaced_peering(k8s_tools):
    # kopf chooses KopfPeering (per namespace) whenever it serves named namespaces.
    objects = render(k8s_tools, *VALUE_SETS["cluster-rbac-for-namespaces"])
    assert not by_kind(objects, "Role")
    assert ("kopf.dev", "kopfpeerings", "patch") in rule_set(the(objects, "ClusterRole"))
    (peering,) = by_kind(objects, "KopfPeering")
    assert (peering["metadata"]["name"], peering["metadata"]["namespace"]) == ("pets-ha", "team-a")
    assert operator_env(objects)["PETS_OPERATOR_PEERING"] == "pets-ha"


def test_cluster_wide_peering_uses_a_cluster_peering_object(k8s_tools):
    objects = render(k8s_tools, "peering.enabled=true")
    assert the(objects, "ClusterKopfPeering")["metadata"]["name"] == operator_env(objects)["PETS_OPERATOR_PEERING"]
    assert ("kopf.dev", "clusterkopfpeerings", "patch") in rule_set(the(objects, "ClusterRole"))


def test_several_replicas_stand_by_through_peering(k8s_tools):
    objects = render(k8s_tools, "replicas=3", "peering.enabled=true")
    deployment = the(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    env = operator_env(objects)
    assert env["PETS_OPERATOR_PEERING"] == the(objects, "ClusterKopfPeering")["metadata"]["name"]
    assert "PETS_OPERATOR_PRIORITY" not in env  # each pod picks its own, so peers never tie


def test_leader_election_on_a_lease_in_the_release_namespace(k8s_tools):
    objects = render(k8s_tools)
    env = operator_env(objects)
    assert (env["PETS_OPERATOR_LEASE_NAME"], env["PETS_OPERATOR_LEASE_DURATION_SECONDS"],
            env["PETS_OPERATOR_LEASE_RENEW_DEADLINE_SECONDS"], env["PETS_OPERATOR_LEASE_RETRY_PERIOD_SECONDS"]) == \
        ("pets-operator-leader", "15", "10", "2")
    container = the(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    namespace = next(item for item in container["env"] if item["name"] == "PETS_OPERATOR_LEASE_NAMESPACE")
    assert namespace["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    pod_id = next(item for item in container["env"] if item["name"] == "POD_ID")  # the holder identity
    assert pod_id["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    role, binding = the(objects, "Role"), the(objects, "RoleBinding")
    assert role["metadata"]["name"] == binding["metadata"]["name"] == LEADER_ELECTION_ROLE
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "pets-operator"
    assert role["rules"] == [  # create it once; then read and renew that one Lease only
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["pets-operator-leader"],
         "verbs": ["get", "update"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pets-operator", "namespace": "pets-operator"}]
    assert not [rule for rule in rule_set(the(objects, "ClusterRole")) if rule[1] == "leases"]  # nowhere else
    from pets_operator.config import LeaseConfig, from_environ  # the operator reads what the chart writes
    config = from_environ({key: value for key, value in env.items() if value is not None})
    assert config.leader_election == LeaseConfig("pets-operator-leader", "", 15, 10, 2)


def test_leader_election_can_be_turned_off_for_a_single_replica_or_replaced_by_peering(k8s_tools):
    single = render(k8s_tools, "replicas=1", "leaderElection.enabled=false")
    assert operator_env(single)["PETS_OPERATOR_LEADER_ELECT"] == "false" and not by_kind(single, "Role")
    assert "PETS_OPERATOR_LEASE_NAME" not in operator_env(single)
    assert the(single, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    peered = render(k8s_tools, "peering.enabled=true")
    assert operator_env(peered)["PETS_OPERATOR_LEADER_ELECT"] == "false" and not by_kind(peered, "Role")
    named = render(k8s_tools, "leaderElection.leaseName=pets-a", "leaderElection.leaseDurationSeconds=30",
                   "leaderElection.renewDeadlineSeconds=20", "leaderElection.retryPeriodSeconds=4")
    env = operator_env(named)
    assert (env["PETS_OPERATOR_LEASE_NAME"], env["PETS_OPERATOR_LEASE_DURATION_SECONDS"]) == ("pets-a", "30")
    assert the(named, "Role")["rules"][1]["resourceNames"] == ["pets-a"]


def test_existing_service_account_without_rbac(k8s_tools):
    objects = render(k8s_tools, *VALUE_SETS["bring-your-own-account"])
    # No RBAC; the admission policy stays: it is no permission of the operator's.
    assert {obj["kind"] for obj in objects} == {"Namespace", "Deployment", "NetworkPolicy", "Service", "ConfigMap",
                                                "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    deployment = the(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 0
    assert pod["serviceAccountName"] == "ops"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert deployment["spec"]["template"]["metadata"]["annotations"] == {"team": "ml"}
    container = pod["containers"][0]
    assert (container["image"], container["imagePullPolicy"]) == ("registry.example/pets-operator:dev", "Always")
    assert container["resources"]["requests"]["cpu"] == "100m"
    assert container["resources"]["limits"]["memory"] == "512Mi"


PODGROUP_GROUPS = {"coscheduling": "scheduling.x-k8s.io", "volcano": "scheduling.volcano.sh"}


def podgroup_rules(role: dict) -> set[tuple[str, str, str]]:
    return {rule for rule in rule_set(role) if rule[1] == "podgroups"}


def test_podgroup_permission_only_with_gang_scheduling_enabled(k8s_tools):
    for sets in ((), ("watchNamespaces={team-a}",), ("gangScheduling.schedulers={volcano}",)):
        for role in by_kind(render(k8s_tools, *sets), "ClusterRole") + job_roles(render(k8s_tools, *sets)):
            assert podgroup_rules(role) == set(), sets
    everything = {(group, "podgroups", verb) for group in PODGROUP_GROUPS.values() for verb in ("get", "create")}
    assert podgroup_rules(the(render(k8s_tools, "gangScheduling.enabled=true"), "ClusterRole")) == everything
    for scheduler, group in PODGROUP_GROUPS.items():
        objects = render(k8s_tools, "gangScheduling.enabled=true", f"gangScheduling.schedulers={{{scheduler}}}",
                         "watchNamespaces={team-a,team-b}")
        roles = job_roles(objects)
        assert len(roles) == 2 and not by_kind(objects, "ClusterRole")
        for role in roles:  # only the listed scheduler's group, only create (and get: is one there the job's?)
            assert podgroup_rules(role) == {(group, "podgroups", "create"), (group, "podgroups", "get")}


def test_the_operator_can_never_edit_a_pod_so_never_remove_kueue_s_finalizer(k8s_tools):
    for sets in ((), ("watchNamespaces={team-a}",), ("gangScheduling.enabled=true",)):
        for role in by_kind(render(k8s_tools, *sets), "ClusterRole") + job_roles(render(k8s_tools, *sets)):
            pod_verbs = {verb for group, resource, verb in rule_set(role) if (group, resource) == ("", "pods")}
            assert pod_verbs == {"get", "list", "watch", "create", "delete"}, sets  # no patch, no update


def test_gang_scheduler_names_reach_the_operator(k8s_tools):
    assert {key: value for key, value in operator_env(render(k8s_tools)).items() if "SCHEDULER_NAME" in key} == {
        "PETS_OPERATOR_COSCHEDULING_SCHEDULER_NAME": "scheduler-plugins-scheduler",
        "PETS_OPERATOR_VOLCANO_SCHEDULER_NAME": "volcano"}
    env = operator_env(render(k8s_tools, *VALUE_SETS["gang-scheduling"]))
    assert env["PETS_OPERATOR_VOLCANO_SCHEDULER_NAME"] == "volcano-batch"
    from pets_operator.config import from_environ  # the operator reads what the chart writes
    config = from_environ({key: value for key, value in env.items() if value is not None})
    assert config.gang_scheduler_names == {"coscheduling": "scheduler-plugins-scheduler", "volcano": "volcano-batch"}


@pytest.mark.parametrize("sets, message", [
    (("replicas=2", "leaderElection.enabled=false"), "replicas > 1 needs leaderElection.enabled=true"),
    (("leaderElection.renewDeadlineSeconds=15",), "leaseDurationSeconds > renewDeadlineSeconds > 1.2 x"),
    (("leaderElection.retryPeriodSeconds=9",), "got 15 > 10 > 1.2 x 9"),
    (("leaderElection.leaseName=Not_A_Name",), "leaseName"),
    (("gangScheduling.schedulers={slurm}",), "schedulers"),
    (("gangScheduling.coschedulingSchedulerName=Not_A_Name",), "coschedulingSchedulerName"),
    (("replicas=11", "peering.enabled=true"), "replicas"),
    (("rbac.scope=namespaced",), "rbac.scope=namespaced needs watchNamespaces"),
    (("watchNamespaces={Not_A_Namespace}",), "watchNamespaces"),
    (("logLevel=LOUD",), "logLevel"),
    (("unknownKey=1",), "unknownKey"),
    (("metrics.port=8080",), "metrics.port and livenessPort must differ"),
    (("metrics.serviceMonitor.interval=often",), "interval"),
    (("policy.hostPath.pathPrefixes={datasets}",), "pathPrefixes"),
    (("policy.allowedImages={a b}",), "allowedImages"),
])
def test_bad_values_are_refused_with_a_message(k8s_tools, sets, message):
    with pytest.raises(chart.HelmError, match=message.replace(".", r"\.").replace("=", "=")):
        chart.template(k8s_tools.helm, sets=sets)


def test_notes_tell_how_to_submit_and_watch_the_sample_job(k8s_tools):
    notes = chart.helm(k8s_tools.helm, "install", "pets", str(chart.CHART_DIR), "--dry-run=client",
                       "--namespace", "pets-operator")
    assert "kubectl apply -f manifests/job.yaml" in notes
    assert "kubectl get ptj -w" in notes
    namespaced = chart.helm(k8s_tools.helm, "install", "pets", str(chart.CHART_DIR), "--dry-run=client",
                            "--namespace", "pets-operator", "--set", "watchNamespaces={team-a}")
    assert "kubectl get ptj -n team-a -w" in namespaced


# kubernetes-client method -> the (resource, verb) it needs; `custom_object` is the job.
CLIENT_VERBS = {"create": "create", "delete": "delete", "read": "get", "get": "get", "list": "list",
                "patch": "patch", "replace": "update"}
CLIENT_RESOURCES = {"pod": ("", "pods"), "service": ("", "services"), "pod_log": ("", "pods/log"),
                    "network_policy": ("networking.k8s.io", "networkpolicies"),
                    "custom_object": ("training.pets.dev", "petstrainingjobs"),
                    "custom_object_status": ("training.pets.dev", "petstrainingjobs/status"),
                    "event": ("", "events")}
# `self.scheduling.*` calls: the PodGroups of both gang schedulers (granted with gangScheduling.enabled).
SCHEDULING_GROUPS = tuple(PODGROUP_GROUPS.values())


def operator_api_calls() -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every `self.core.*` / `self.custom.*` / `self.networking.*` call in
    pets_operator/kube.py."""
    import ast

    import pets_operator.kube

    tree = ast.parse(Path(pets_operator.kube.__file__).read_text())
    needed = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and node.value.attr in ("core", "custom", "networking", "scheduling") and node.attr != "api_client"):
            verb, _, rest = node.attr.partition("_")
            kind = rest.removeprefix("namespaced_")
            assert verb in CLIENT_VERBS and kind in CLIENT_RESOURCES, \
                f"kube.py calls {node.attr}: add its permission to the chart's RBAC and to this map"
            if node.value.attr == "scheduling":
                needed |= {(group, "podgroups", CLIENT_VERBS[verb]) for group in SCHEDULING_GROUPS}
            else:
                needed.add((*CLIENT_RESOURCES[kind], CLIENT_VERBS[verb]))
    return needed


def kopf_calls(*, cluster_wide: bool, peering: bool) -> set[tuple[str, str, str]]:
    """What kopf itself asks for, derived from the handlers pets_operator registers: list and watch of each resource
    it handles; patch (its finalizer, progress annotations, and status through the subresource) of each resource
    with a daemon or change handler; Events posted about them. Cluster-wide it also watches CRDs (the operator
    turns scanning off when it serves named namespaces: `handlers.configure`); peering patches and watches its
    peering object."""
    import kopf

    import pets_operator.handlers  # noqa: F401  (registers the handlers)

    registry = kopf.get_default_registry()
    def resources(*kinds) -> set[tuple[str, str]]:
        return {(handler.selector.group, handler.selector.plural or handler.selector.any_name)
                for kind in kinds for handler in kind.get_all_handlers()}
    watched = resources(registry._indexing, registry._watching, registry._spawning, registry._changing)
    patched = resources(registry._spawning, registry._changing)
    calls = {(group, plural, verb) for group, plural in watched for verb in ("list", "watch")}
    calls |= {(group, plural + suffix, "patch") for group, plural in patched for suffix in ("", "/status")}
    calls.add(("", "events", "create"))
    if cluster_wide:
        calls |= {("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in ("list", "watch")}
    if peering:
        plural = "clusterkopfpeerings" if cluster_wide else "kopfpeerings"
        calls |= {("kopf.dev", plural, verb) for verb in ("list", "watch", "patch")}
    return calls


# The operator's calls outside kube.py and kopf: pets_operator/logfollow.py reads each pod and follows its log.
LOG_FOLLOWER_CALLS = {("", "pods", "get"), ("", "pods/log", "get")}


def operator_calls(*, cluster_wide: bool, peering: bool = False, network_policy: bool = True,
                   schedulers: tuple[str, ...] = ()) -> set[tuple[str, str, str]]:
    """Every (group, resource, verb) the operator asks for on the namespaces it serves, with these chart values."""
    calls = {call for call in operator_api_calls() if call[1] != "podgroups"} | LOG_FOLLOWER_CALLS
    calls |= {call for call in operator_api_calls() if call[0] in {PODGROUP_GROUPS[s] for s in schedulers}}
    if not network_policy:
        calls = {call for call in calls if call[1] != "networkpolicies"}
    return calls | kopf_calls(cluster_wide=cluster_wide, peering=peering)


def lease_calls() -> set[tuple[str, str, str]]:
    """The leader election's Lease calls: kubernetes' LeaseLock and pets_operator/leadership.py (`*_namespaced_lease`)."""
    import ast

    import kubernetes.leaderelection.resourcelock.leaselock as leaselock

    import pets_operator.leadership

    calls = set()
    for module in (leaselock, pets_operator.leadership):
        for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
            if isinstance(node, ast.Attribute) and node.attr.endswith("_namespaced_lease"):
                calls.add(("coordination.k8s.io", "leases", CLIENT_VERBS[node.attr.partition("_")[0]]))
    return calls


@pytest.mark.parametrize("sets, expected", [
    ((), dict(cluster_wide=True)),
    (("gangScheduling.enabled=true",), dict(cluster_wide=True, schedulers=("coscheduling", "volcano"))),
    (("networkPolicy.enabled=false",), dict(cluster_wide=True, network_policy=False)),
    (("peering.enabled=true",), dict(cluster_wide=True, peering=True)),
    (VALUE_SETS["cluster-rbac-for-namespaces"], dict(cluster_wide=False, peering=True, network_policy=False)),
    (("watchNamespaces={team-a}",), dict(cluster_wide=False)),
    (VALUE_SETS["namespaced-peering"], dict(cluster_wide=False, peering=True)),
    (VALUE_SETS["gang-scheduling"], dict(cluster_wide=False, schedulers=("volcano",))),
], ids=["default", "gang", "no-network-policy", "peering", "cluster-rbac-for-namespaces", "namespaced",
        "namespaced-peering", "namespaced-gang"])
def test_the_rules_are_exactly_the_calls_the_operator_makes(k8s_tools, sets, expected):
    """A verb granted that nothing uses, or a call without its grant, fails here (docs/security.md, Least
    privilege); tests/realcluster/test_helm_install.py and test_helm_namespaced.py run a job under these rules."""
    objects = render(k8s_tools, *sets)
    roles = by_kind(objects, "ClusterRole") + job_roles(objects)
    assert roles
    for role in roles:
        assert rule_set(role) == operator_calls(**expected), role["metadata"]
    for role in by_kind(objects, "Role"):
        if role["metadata"]["name"] == LEADER_ELECTION_ROLE:
            assert rule_set(role) == lease_calls()


def test_the_derived_calls_find_what_they_scan():
    calls = operator_calls(cluster_wide=True, peering=True, schedulers=("coscheduling",))
    assert {("", "pods", "create"), ("", "pods", "watch"), ("training.pets.dev", "petstrainingjobs", "patch"),
            ("training.pets.dev", "petstrainingjobs/status", "patch"), ("scheduling.x-k8s.io", "podgroups", "create"),
            ("kopf.dev", "clusterkopfpeerings", "patch"), ("", "events", "list")} <= calls
    assert not {call for call in calls if call[1] == "pods" and call[2] in ("patch", "update")}
    assert lease_calls() == {("coordination.k8s.io", "leases", verb) for verb in ("create", "get", "update")}


def policy_environ(objects: list[dict]) -> dict[str, str]:
    """The operator's environment as the kubelet gives it: `value`s, and configMapKeyRefs read from the ConfigMap."""
    container = the(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    maps = {cm["metadata"]["name"]: cm["data"] for cm in by_kind(objects, "ConfigMap")}
    environ = {}
    for item in container["env"]:
        ref = (item.get("valueFrom") or {}).get("configMapKeyRef")
        if "value" in item:
            environ[item["name"]] = item["value"]
        elif ref is not None:
            environ[item["name"]] = maps[ref["name"]][ref["key"]]
    return environ


def test_the_policy_is_on_by_default_bound_to_every_namespace_and_fails_closed(k8s_tools):
    from pets_operator.config import from_environ
    from pets_operator.policy import Policy

    objects = render(k8s_tools)
    settings = the(objects, "ConfigMap")
    assert settings["metadata"]["namespace"] == "pets-operator"
    assert settings["data"] == {"allowedImages": "pets-trainer:0.1.0", "hostPathAllowed": "false",
                                "hostPathPrefixes": ""}
    policy, binding = the(objects, "ValidatingAdmissionPolicy"), the(objects, "ValidatingAdmissionPolicyBinding")
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [{
        "apiGroups": ["training.pets.dev"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
        "resources": ["petstrainingjobs"]}]
    assert all(rule["reason"] == "Forbidden" and rule["messageExpression"] for rule in policy["spec"]["validations"])
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"], "validationActions": ["Deny"],
        "paramRef": {"name": settings["metadata"]["name"], "namespace": "pets-operator",
                     "parameterNotFoundAction": "Deny"}}  # no matchResources: every namespace
    # The operator reads the same ConfigMap: one source for both checks.
    assert from_environ(policy_environ(objects)).policy == Policy(("pets-trainer:0.1.0",), False, ())


def test_policy_values_reach_the_configmap_and_so_the_operator(k8s_tools):
    from pets_operator.config import from_environ
    from pets_operator.policy import Policy

    objects = render(k8s_tools, *VALUE_SETS["policy-allowing-more"], "trainerImage=registry.example/ml/pets:3")
    assert the(objects, "ConfigMap")["data"] == {
        "allowedImages": "registry.example/ml/pets:3,registry.example/ml/*,other:2", "hostPathAllowed": "true",
        "hostPathPrefixes": "/mnt/datasets,/scratch"}
    assert from_environ(policy_environ(objects)).policy == Policy(
        ("registry.example/ml/pets:3", "registry.example/ml/*", "other:2"), True, ("/mnt/datasets", "/scratch"))


def test_the_policy_can_leave_admission_to_the_operator_or_be_turned_off(k8s_tools):
    from pets_operator.config import from_environ
    from pets_operator.policy import UNRESTRICTED

    operator_only = render(k8s_tools, "policy.admission=false")
    assert by_kind(operator_only, "ValidatingAdmissionPolicy") == [] and by_kind(operator_only, "ConfigMap")
    assert from_environ(policy_environ(operator_only)).policy.allowed_images == ("pets-trainer:0.1.0",)
    off = render(k8s_tools, "policy.enabled=false")
    assert not {"ConfigMap", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} & {o["kind"] for o in off}
    assert not [name for name in policy_environ(off) if name.startswith("PETS_OPERATOR_POLICY_")]
    assert from_environ(policy_environ(off)).policy == UNRESTRICTED


def test_admission_on_a_cluster_older_than_1_30_is_refused_with_the_value_to_set(k8s_tools):
    args = ("template", "pets", str(chart.CHART_DIR), "--kube-version", "1.29.4")
    with pytest.raises(chart.HelmError, match=r"policy\.admission needs Kubernetes 1\.30 .*set policy\.admission=false"):
        chart.helm(k8s_tools.helm, *args)
    assert "ValidatingAdmissionPolicy" not in chart.helm(k8s_tools.helm, *args, "--set", "policy.admission=false")
