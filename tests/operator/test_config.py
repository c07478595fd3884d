import logging

import pytest

from pets_operator.config import ConfigError, LeaseConfig, from_environ
from pets_operator.run import kopf_run_options, parse


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


def test_leader_election_is_on_by_default_with_client_go_s_timings():
    lease = from_environ({}).leader_election
    assert lease == LeaseConfig(name="pets-operator-leader", namespace="", duration_seconds=15,
                                renew_deadline_seconds=10, retry_period_seconds=2)
    short = from_environ({"PETS_OPERATOR_LEASE_NAME": "pets-a", "PETS_OPERATOR_LEASE_NAMESPACE": "ops",
                          "PETS_OPERATOR_LEASE_DURATION_SECONDS": "4", "PETS_OPERATOR_LEASE_RENEW_DEADLINE_SECONDS": "3",
                          "PETS_OPERATOR_LEASE_RETRY_PERIOD_SECONDS": "1"}).leader_election
    assert short == LeaseConfig("pets-a", "ops", 4, 3, 1)


def test_leader_election_turns_off_by_env_flag_or_peering():
    assert from_environ({"PETS_OPERATOR_LEADER_ELECT": "false"}).leader_election is None
    assert parse(["--no-leader-elect"], {})[1].leader_election is None
    assert parse([], {})[1].leader_election is not None
    assert from_environ({"PETS_OPERATOR_PEERING": "pets"}).leader_election is None  # peering picks the replica
    with pytest.raises(ConfigError, match="PETS_OPERATOR_LEADER_ELECT=true and PETS_OPERATOR_PEERING"):
        from_environ({"PETS_OPERATOR_PEERING": "pets", "PETS_OPERATOR_LEADER_ELECT": "true"})


@pytest.mark.parametrize("env, words", [
    ({"PETS_OPERATOR_LEADER_ELECT": "perhaps"}, "PETS_OPERATOR_LEADER_ELECT must be true or false"),
    ({"PETS_OPERATOR_LEASE_DURATION_SECONDS": "4.5"}, "PETS_OPERATOR_LEASE_DURATION_SECONDS must be a whole number"),
    ({"PETS_OPERATOR_LEASE_RETRY_PERIOD_SECONDS": "0"}, "PETS_OPERATOR_LEASE_RETRY_PERIOD_SECONDS must be at least 1"),
    ({"PETS_OPERATOR_LEASE_DURATION_SECONDS": "10"}, "got 10 > 10 > 1.2 x 2"),
    ({"PETS_OPERATOR_LEASE_RENEW_DEADLINE_SECONDS": "2"}, "got 15 > 2 > 1.2 x 2"),
    ({"PETS_OPERATOR_LEASE_NAME": "Leader!"}, "PETS_OPERATOR_LEASE_NAME"),
    ({"PETS_OPERATOR_LEASE_NAMESPACE": "a.b"}, "PETS_OPERATOR_LEASE_NAMESPACE"),
])
def test_bad_lease_settings_name_the_variable(env, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.").replace(">", ">")):
        from_environ(env)
