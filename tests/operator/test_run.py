"""`pets-operator run` before kopf starts: a liveness port already in use is one line and exit 1."""
import socket

from pets_operator import run as main


def test_a_free_port_is_no_problem():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert main.liveness_port_problem(port) is None


def test_a_taken_port_is_one_error_line_and_exit_1(monkeypatch, capsys):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("PETS_OPERATOR_LIVENESS_PORT", str(port))
        assert main.main([]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot serve the liveness endpoint on port ") and err.count("\n") == 1
    assert "PETS_OPERATOR_LIVENESS_PORT" in err
