import logging

import pytest

from pets_operator.config import ConfigError, from_environ
from pets_operator.run import kopf_run_options


def test_defaults_are_cluster_wide_standalone():
    config = from_environ({})
    assert config.cluster_wide and config.trainer_image == "pets-trainer:0.1.0"
    assert config.log_level_number == logging.INFO
    assert kopf_run_options(config) == {"standalone": True, "clusterwide": True, "namespaces": [],
                                        "liveness_endpoint": "http://0.0.0.0:8080/healthz"}


def test_namespaces_peering_and_port():
    config = from_environ({"PETS_OPERATOR_NAMESPACES": " ml, team-b ,", "PETS_OPERATOR_PEERING": "pets",
                           "PETS_OPERATOR_LIVENESS_PORT": "0", "PETS_OPERATOR_LOG_LEVEL": "debug",
                           "PETS_OPERATOR_TRAINER_IMAGE": "registry/pets-trainer:2"})
    assert config.namespaces == ("ml", "team-b") and config.log_level == "DEBUG"
    assert config.trainer_image == "registry/pets-trainer:2"
    options = kopf_run_options(config)
    assert options.pop("priority") >= 1
    assert options == {"standalone": False, "clusterwide": False, "namespaces": ["ml", "team-b"],
                       "peering_name": "pets"}


def test_replicas_of_a_peering_get_distinct_priorities_unless_given():
    config = from_environ({"PETS_OPERATOR_PEERING": "pets"})
    assert len({kopf_run_options(config)["priority"] for _ in range(20)}) > 1
    fixed = from_environ({"PETS_OPERATOR_PEERING": "pets", "PETS_OPERATOR_PRIORITY": "7"})
    assert kopf_run_options(fixed)["priority"] == 7
    with pytest.raises(ConfigError, match="PETS_OPERATOR_PRIORITY"):
        from_environ({"PETS_OPERATOR_PRIORITY": "high"})


@pytest.mark.parametrize("env, word", [({"PETS_OPERATOR_LOG_LEVEL": "loud"}, "PETS_OPERATOR_LOG_LEVEL"),
                                       ({"PETS_OPERATOR_LIVENESS_PORT": "http"}, "PETS_OPERATOR_LIVENESS_PORT"),
                                       ({"PETS_OPERATOR_LIVENESS_PORT": "70000"}, "PETS_OPERATOR_LIVENESS_PORT"),
                                       ({"PETS_OPERATOR_NETWORK_POLICY": "maybe"}, "PETS_OPERATOR_NETWORK_POLICY")])
def test_bad_configuration_names_the_variable(env, word):
    with pytest.raises(ConfigError, match=word):
        from_environ(env)


def test_run_reports_bad_configuration_without_traceback(monkeypatch, capsys):
    from pets_operator.run import main
    monkeypatch.setenv("PETS_OPERATOR_LOG_LEVEL", "loud")
    assert main([]) == 2
    assert capsys.readouterr().err.startswith("error: PETS_OPERATOR_LOG_LEVEL")


def test_trainer_command_override():
    assert from_environ({}).trainer_command == ("pets-train",)
    config = from_environ({"PETS_OPERATOR_TRAINER_COMMAND": '["python", "/opt/stand_in.py"]'})
    assert config.trainer_command == ("python", "/opt/stand_in.py")
    for bad in ("python x.py", "[]", '[""]', "[1]"):
        with pytest.raises(ConfigError, match="PETS_OPERATOR_TRAINER_COMMAND"):
            from_environ({"PETS_OPERATOR_TRAINER_COMMAND": bad})


def test_network_policies_are_on_unless_turned_off():
    assert from_environ({}).network_policy is True
    assert from_environ({"PETS_OPERATOR_NETWORK_POLICY": ""}).network_policy is True
    assert from_environ({"PETS_OPERATOR_NETWORK_POLICY": "false"}).network_policy is False
    assert from_environ({"PETS_OPERATOR_NETWORK_POLICY": " True "}).network_policy is True
