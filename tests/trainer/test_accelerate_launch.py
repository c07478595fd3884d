"""pets-train's launcher names why a training process failed: the signal that killed it, the exception it
recorded in torch elastic's error file, or its exit status; in the termination message too, never the
failure summary's row of `=`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from pets_client.launcher import FUNCTION_KEY, build_payload
from pets_operator.status import failure_cause
from pets_trainer.accelerate_launch import ProcessEnd, describe, recorded_error, root_cause

KILLED = ProcessEnd(rank=1, exitcode=-9, local_rank=1, pid=4242)


def test_a_killed_process_is_named_with_its_signal():
    assert describe(KILLED) == ("training process rank 1 (pid 4242) was killed by SIGKILL (signal 9), "
                                "e.g. by the out-of-memory killer or kill -9")
    assert describe(ProcessEnd(rank=None, exitcode=-15)) == "the training process was killed by SIGTERM (signal 15)"
    assert describe(ProcessEnd(rank=3, exitcode=-200)) == "training process rank 3 was killed by an unknown signal (signal 200)"


def test_a_recorded_exception_is_the_cause_else_the_exit_status():
    recorded = recorded_error({"message": {"message": "ValueError: the loss\ndiverged", "extraInfo": {}}})
    assert recorded == "ValueError: the loss"
    assert describe(ProcessEnd(rank=0, exitcode=1, recorded=recorded)) == "ValueError: the loss"
    assert describe(ProcessEnd(rank=2, exitcode=1, local_rank=0, pid=7)) == (
        "training process rank 2 (local rank 0, pid 7) exited with status 1")
    # torch elastic's placeholder when a process wrote no error file
    assert recorded_error({"message": "<NONE>"}) is None and recorded_error(None) is None


def test_the_root_cause_is_a_killed_process_before_the_errors_it_caused():
    lost_peer = ProcessEnd(rank=0, exitcode=1, recorded="RuntimeError: Connection closed by peer", first=True)
    assert root_cause([lost_peer, KILLED]) == KILLED
    assert root_cause([ProcessEnd(rank=1, exitcode=1), lost_peer]) == lost_peer
    stopped = ProcessEnd(rank=0, exitcode=-15)  # torch elastic stops the others with SIGTERM
    raised = ProcessEnd(rank=1, exitcode=1, recorded="ValueError: the loss diverged", first=True)
    assert root_cause([stopped, raised]) == raised


SUMMARY_TAIL = """
============================================================
pets_trainer.function FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4242)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
============================================================
"""


@pytest.mark.parametrize("tail", [SUMMARY_TAIL, SUMMARY_TAIL + "-----\n  ===  \n", "====\n----\n"])
def test_the_operator_never_takes_a_summary_s_frame_for_the_cause(tail):
    """A log tail without the launcher's `error:` line (an older image, a launcher that was killed)."""
    cause = failure_cause(tail)
    assert cause is None or cause.strip("=- ") != "", cause
    if "traceback" in tail:
        assert cause == "traceback : Signal 9 (SIGKILL) received by PID 4242"


# --- real runs: `pets-train` with a shipped function, a process killed with kill -9 -------------------------


def prints_its_pid_and_waits():
    import json
    import os
    import time

    print(json.dumps({"rank": int(os.environ.get("RANK", "0")), "pid": os.getpid()}), flush=True)
    time.sleep(600)


def raises_on_rank_one():
    import os
    import time

    if os.environ["RANK"] == "1":
        raise ValueError("the loss diverged at step 3")
    time.sleep(600)


def start_function(trainer_processes, trainer_env, tmp_path, function, termination=True, **env):
    data, _ = build_payload(function)
    payload = tmp_path / FUNCTION_KEY
    payload.write_bytes(data)
    values = {"FUNCTION_FILE": str(payload), "OMP_NUM_THREADS": "1", **env}
    if termination:
        (tmp_path / "termination-log").write_text("")
        values["TERMINATION_MESSAGE_PATH"] = str(tmp_path / "termination-log")
    return trainer_processes.start(trainer_env(tiny=False, **values))


def pids_of(process, count):
    pids = {}
    while len(pids) < count:
        line = process.stdout.readline()
        assert line, "pets-train ended before its processes started: " + process.stderr.read()[-3000:]
        if line.startswith("{"):
            printed = json.loads(line)
            pids[printed["rank"]] = printed["pid"]
    return pids


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 1], ids=["torchrun", "one-process"])
def test_kill_9_of_a_training_process_is_the_termination_message(trainer_processes, trainer_env, tmp_path, nproc):
    process = start_function(trainer_processes, trainer_env, tmp_path, prints_its_pid_and_waits,
                             NPROC_PER_NODE=str(nproc))
    pids = pids_of(process, nproc)
    victim = max(pids)
    os.kill(pids[victim], signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr[-3000:]
    message = (tmp_path / "termination-log").read_text()
    assert "was killed by SIGKILL (signal 9)" in message, message
    if nproc > 1:
        assert message.startswith(f"training process rank {victim} (pid {pids[victim]})"), message
    assert stderr.strip().splitlines()[-1] == f"error: {message}", stderr[-3000:]
    # Without the file, Kubernetes (FallbackToLogsOnError) gives the operator the log's last 2048 bytes.
    assert failure_cause(stderr[-2048:]) == message


@pytest.mark.slow
def test_an_exception_recorded_in_the_error_file_is_named_by_the_launcher(trainer_processes, trainer_env, tmp_path):
    # No termination message file (pets-train by hand): the launcher's last line gives the exception,
    # from torch elastic's error file, and the failure summary shows it instead of an exit code alone.
    process = start_function(trainer_processes, trainer_env, tmp_path, raises_on_rank_one, termination=False,
                             NPROC_PER_NODE="2")
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert lines[-1] == "error: ValueError: the loss diverged at step 3", stderr[-3000:]
    summary = stderr[stderr.rindex("pets_trainer.function FAILED"):]
    assert "ValueError: the loss diverged at step 3" in summary and "To enable traceback" not in summary, summary


@pytest.mark.slow  # a Python that imports torch and timm
def test_a_training_process_s_own_error_stays_the_message(trainer_env, tmp_path):
    """A one-line error of a training process stays the termination message; the launcher adds nothing."""
    (tmp_path / "termination-log").write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "pets_trainer.accelerate_launch", "--num_processes", "1", "-m",
         "pets_trainer.worker", "--config", json.dumps({"data_dir": str(tmp_path / "missing")})],
        env=trainer_env(TERMINATION_MESSAGE_PATH=str(tmp_path / "termination-log")),
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    message = (tmp_path / "termination-log").read_text()
    assert "missing" in message and "exited with status" not in message, message
    assert result.stderr.strip().splitlines()[-1] == f"error: {message}", result.stderr[-3000:]
