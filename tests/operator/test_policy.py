"""The cluster admin's policy, as the operator checks it: images, hostPath at all, hostPath prefixes."""
import pytest

from pets_operator.config import ConfigError, from_environ
from pets_operator.policy import UNRESTRICTED, Policy, host_paths, inside, policy_problems

DEFAULT = "pets-trainer:0.1.0"
CHART_DEFAULT = Policy(allowed_images=(DEFAULT,), host_path_allowed=False)  # the chart's policy.* defaults


def synthetic(**fields):
    return {"data": {"synthetic": {}}, **fields}


def test_no_settings_restrict_nothing():
    spec = {"image": "elsewhere/any:latest", "data": {"hostPath": "/etc"}, "checkpoint": {"hostPath": "/root"}}
    assert policy_problems(spec, UNRESTRICTED, DEFAULT) == []
    assert from_environ({}).policy == UNRESTRICTED


def test_the_default_image_and_a_spec_without_image_pass_the_chart_s_defaults():
    assert policy_problems(synthetic(), CHART_DEFAULT, DEFAULT) == []
    assert policy_problems(synthetic(image=DEFAULT), CHART_DEFAULT, DEFAULT) == []
    # The image the operator fills in is its own choice, never refused, even when the list leaves it out.
    assert policy_problems(synthetic(image=DEFAULT), Policy(allowed_images=()), DEFAULT) == []


def test_a_foreign_image_is_refused_naming_the_image_the_allowed_ones_and_the_chart_value():
    policy = Policy(allowed_images=(DEFAULT, "registry.example/ml/*"))
    assert policy_problems(synthetic(image="registry.example/ml/trainer:2"), policy, DEFAULT) == []
    assert policy_problems(synthetic(image="docker.io/evil/miner:1"), policy, DEFAULT) == [
        'spec.image "docker.io/evil/miner:1" is not an allowed trainer image (allowed: pets-trainer:0.1.0, '
        'registry.example/ml/*); a cluster admin allows it with the chart value policy.allowedImages']
    # An exact entry is exact: another tag of the same repository is another image.
    assert len(policy_problems(synthetic(image="pets-trainer:0.1.0-evil"), policy, DEFAULT)) == 1


def test_every_hostpath_field_is_found_in_order():
    spec = {"data": {"hostPath": "/d"}, "checkpoint": {"hostPath": "/c"}, "cache": {"hostPath": "/k"},
            "output": {"hostPath": "/o"}, "tracking": {"tensorboard": {"hostPath": "/t", "logDir": "/tb"}}}
    assert host_paths(spec) == [("data", "/d"), ("checkpoint", "/c"), ("cache", "/k"), ("output", "/o"),
                                ("tracking.tensorboard", "/t")]
    assert host_paths({"data": {"persistentVolumeClaim": {"claimName": "x"}}, "tracking": {"mlflow": {}}}) == []


def test_hostpath_is_refused_when_not_allowed_at_all():
    spec = {"data": {"synthetic": {}}, "output": {"hostPath": "/srv/models", "path": "/output"}}
    assert policy_problems(spec, CHART_DEFAULT, DEFAULT) == [
        'spec.output.hostPath "/srv/models": hostPath volumes are not allowed (they mount the file system of the node); '
        'a cluster admin allows them with the chart value policy.hostPath.allowed']


def test_hostpath_outside_the_prefixes_is_refused_inside_is_admitted():
    policy = Policy(allowed_images=(DEFAULT,), host_path_prefixes=("/mnt/datasets", "/scratch/"))
    admitted = {"data": {"hostPath": "/mnt/datasets/pets"}, "checkpoint": {"hostPath": "/scratch/ckpt"}}
    assert policy_problems(admitted, policy, DEFAULT) == []
    refused = {"data": {"hostPath": "/mnt/datasets-evil"}, "cache": {"hostPath": "/var/lib/kubelet"}}
    assert policy_problems(refused, policy, DEFAULT) == [
        f'spec.{field}.hostPath "{path}" is outside the allowed hostPath prefixes (/mnt/datasets, /scratch/); '
        'a cluster admin allows it with the chart value policy.hostPath.pathPrefixes'
        for field, path in (("data", "/mnt/datasets-evil"), ("cache", "/var/lib/kubelet"))]


@pytest.mark.parametrize("path, prefix, expected", [
    ("/mnt/data", "/mnt/data", True), ("/mnt/data/x", "/mnt/data", True), ("/mnt/data/x", "/mnt/data/", True),
    ("/mnt/database", "/mnt/data", False), ("/mnt/data/../../etc", "/mnt/data", False),
    ("/mnt", "/mnt/data", False), ("/anything", "/", True)])
def test_inside_compares_whole_path_segments_and_refuses_dot_dot(path, prefix, expected):
    assert inside(path, prefix) is expected


def test_settings_come_from_the_environment_the_chart_fills_from_its_configmap():
    config = from_environ({"PETS_OPERATOR_POLICY_ALLOWED_IMAGES": "pets-trainer:0.1.0, registry.example/ml/* ,",
                           "PETS_OPERATOR_POLICY_HOST_PATH_ALLOWED": "true",
                           "PETS_OPERATOR_POLICY_HOST_PATH_PREFIXES": "/mnt/datasets,/scratch"})
    assert config.policy == Policy(allowed_images=("pets-trainer:0.1.0", "registry.example/ml/*"),
                                   host_path_allowed=True, host_path_prefixes=("/mnt/datasets", "/scratch"))
    # Set but empty: no image but the trainer image (the operator's default); hostPath off.
    assert from_environ({"PETS_OPERATOR_POLICY_ALLOWED_IMAGES": "",
                         "PETS_OPERATOR_POLICY_HOST_PATH_ALLOWED": "false"}).policy == Policy((), False, ())


@pytest.mark.parametrize("env, words", [
    ({"PETS_OPERATOR_POLICY_HOST_PATH_ALLOWED": "maybe"}, "PETS_OPERATOR_POLICY_HOST_PATH_ALLOWED"),
    ({"PETS_OPERATOR_POLICY_HOST_PATH_PREFIXES": "/ok,data"}, "absolute paths, got data")])
def test_bad_policy_settings_name_the_variable(env, words):
    with pytest.raises(ConfigError, match=words):
        from_environ(env)
