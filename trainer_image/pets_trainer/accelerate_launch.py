"""`accelerate launch` run in this process, naming the cause when a training process fails.

    python -m pets_trainer.accelerate_launch <accelerate launch arguments>    # what pets-train execs

The launch is Accelerate's own (`launch_command`). What differs is a failed training process: Accelerate
printed torch elastic's failure summary and exited 1, and a process that died without a word (killed
by SIGKILL, e.g. by the out-of-memory killer) left the termination message empty, so Kubernetes put the
log's tail there instead, and the job's status.message gave the summary's last line, a row of `=`.
Here the summary is printed as before, then one `error: ...` line with the cause of the failure, which
also goes into the termination message:

- a process killed by a signal other than SIGTERM (torch elastic stops the others with SIGTERM):
  `training process rank 1 (pid 4242) was killed by SIGKILL (signal 9), ...`;
- else the first failed process's exception as it recorded it in torch elastic's error file
  (TORCHELASTIC_ERROR_FILE; the worker and the function runtime do): `ValueError: the loss diverged`;
- else its exit status.

A training process that wrote its own error into the termination message (the worker's and the function
runtime's one-line errors) has said why: that is kept and no line is added, unless a process was killed
by a signal.
"""
from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import termination_message_written, write_termination_message

NO_RECORD = "<NONE>"  # torch elastic's message for a process whose error file holds nothing


@dataclass(frozen=True)
class ProcessEnd:
    """How one training process ended, as torch elastic (or Accelerate's one-process launcher) saw it."""
    rank: int | None
    exitcode: int
    local_rank: int | None = None
    pid: int | None = None
    recorded: str | None = None  # the exception it recorded in its error file
    first: bool = False  # torch elastic's first observed failure


def recorded_error(error_file_data: Mapping[str, Any] | None) -> str | None:
    """The exception line a process recorded (torch's ErrorHandler format), or None."""
    message = (error_file_data or {}).get("message")
    if isinstance(message, Mapping):
        message = message.get("message")
    if not isinstance(message, str) or not message.strip() or message.strip() == NO_RECORD:
        return None
    return " ".join(message.strip().splitlines()[0].split())


def signal_name(exitcode: int) -> str | None:
    try:
        return signal.Signals(-exitcode).name if exitcode < 0 else None
    except ValueError:
        return None


def root_cause(ends: Iterable[ProcessEnd]) -> ProcessEnd:
    """The end that explains the failure: a process killed by a signal other than SIGTERM (the errors of the
    others, such as a lost peer, are its consequences, and may be recorded in the same second), else torch
    elastic's first observed failure. SIGTERM is how torch elastic stops the other processes once one failed."""
    ends = list(ends)
    killed = [end for end in ends if end.exitcode < 0 and -end.exitcode != signal.SIGTERM]
    return (killed or [e for e in ends if e.first] or ends)[0]


def describe(end: ProcessEnd) -> str:
    """One line: why the process ended."""
    if end.recorded and end.exitcode >= 0:
        return end.recorded
    who = "the training process" if end.rank is None else f"training process rank {end.rank}"
    details = [f"local rank {end.local_rank}" if end.local_rank is not None and end.local_rank != end.rank else None,
               f"pid {end.pid}" if end.pid is not None else None]
    details = [d for d in details if d]
    if details:
        who += f" ({', '.join(details)})"
    if end.exitcode < 0:
        name = signal_name(end.exitcode) or "an unknown signal"
        text = f"{who} was killed by {name} (signal {-end.exitcode})"
        if -end.exitcode == signal.SIGKILL:
            text += ", e.g. by the out-of-memory killer or kill -9"
        return text
    return f"{who} exited with status {end.exitcode}"


def ends_of_child_failure(error: Any) -> list[ProcessEnd]:
    """torch elastic's ChildFailedError as ProcessEnds."""
    first_rank, _ = error.get_first_failure()
    return [ProcessEnd(rank=rank, exitcode=failure.exitcode, local_rank=failure.local_rank, pid=failure.pid,
                       recorded=recorded_error(failure.error_file_data), first=rank == first_rank)
            for rank, failure in error.failures.items()]


def report_failure(end: ProcessEnd) -> int:
    """The cause, as an `error:` line and the termination message, unless a training process has already
    written its own error there (its exact words; a signal is the cause whatever the others wrote)."""
    if end.exitcode < 0 or not termination_message_written():
        cause = describe(end)
        print(f"error: {cause}", file=sys.stderr, flush=True)
        write_termination_message(cause)
    return 1


def main(argv: list[str] | None = None) -> int:
    from accelerate.commands.launch import launch_command, launch_command_parser
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = launch_command_parser().parse_args(argv)
    args.quiet = False  # --quiet would turn a failure into exit 1 before this module sees it
    try:
        launch_command(args)
    except ChildFailedError as error:  # several processes (torchrun)
        print(error, file=sys.stderr, flush=True)  # the summary, as Accelerate prints it
        return report_failure(root_cause(ends_of_child_failure(error)))
    except subprocess.CalledProcessError as error:  # one process (Accelerate's simple launcher)
        return report_failure(ProcessEnd(rank=None, exitcode=error.returncode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
