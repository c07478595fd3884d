"""What the operator logs when jobs go and when it cannot start: one clear line, never a traceback."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def job_spec(**extra):
    return {"numNodes": 2, "epochs": 200, "model": "resnet10t", "data": {"synthetic": {}},
            "env": [{"name": "STAND_IN_EPOCH_SECONDS", "value": "0.5"}], **extra}


def log_records(operator) -> list[dict]:
    records = []
    for line in operator.logs().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            records.append({"message": line, "severity": "unparsed"})
    return records


def test_deleting_a_running_job_logs_no_warning(api, operator_process, stand_in_env, wait_for):
    operator = operator_process(stand_in_env)
    api.create_job("deleted", job_spec())
    wait_for("Running", lambda: ((api.job("deleted") or {}).get("status") or {}).get("phase") == "Running", 60,
             operator.logs)
    api.delete_job("deleted")
    wait_for("the job gone", lambda: api.job("deleted") is None and not api.pods("deleted"), 30, operator.logs)
    records = [r for r in log_records(operator) if (r.get("object") or {}).get("name") == "deleted"]
    noisy = [r for r in records if r.get("severity") not in ("debug", "info")]
    assert noisy == [], noisy
    assert not any("cancelled" in r["message"] or "escalate" in r["message"] for r in records), records
    assert any(r["message"].startswith("stopped following the job") for r in records), records
    assert "Traceback" not in operator.logs()


def test_a_second_operator_on_a_taken_liveness_port_exits_with_one_line(cluster):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"KUBECONFIG": str(cluster.kubeconfig), "PETS_OPERATOR_LIVENESS_PORT": str(port), "PATH": "/usr/bin:/bin"}
        result = subprocess.run([sys.executable, "-m", "pets_operator", "run"], env=env, capture_output=True,
                                text=True, timeout=60)
    assert result.returncode != 0
    output = (result.stdout + result.stderr).strip()
    assert output.startswith("error: ") and len(output.splitlines()) == 1, output
    assert f"port {port}" in output and "PETS_OPERATOR_LIVENESS_PORT" in output
    assert "Traceback" not in output
