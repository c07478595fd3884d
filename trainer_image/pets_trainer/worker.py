"""The module `accelerate launch` runs in every training process: `python -m pets_trainer.worker --config JSON`."""
from __future__ import annotations

import argparse
import sys

from .config import TrainConfig
from .errors import TrainerError, record_for_torch_elastic, report_error, write_termination_message


def main(argv: list[str] | None = None) -> int:
    """A user-fixable error: one line, the termination message, exit 2. Anything else (a bug, a lost peer):
    its last line is the termination message too, and the traceback stays in the log."""
    parser = argparse.ArgumentParser(prog="pets_trainer.worker", description=__doc__)
    parser.add_argument("--config", required=True, help="the TrainConfig as JSON (written by pets-train)")
    args = parser.parse_args(argv)
    try:
        from .train import training_loop

        training_loop(TrainConfig.from_json(args.config))
    except TrainerError as error:
        return report_error(error)
    except Exception as error:
        write_termination_message(f"{type(error).__name__}: {error}".splitlines()[0])
        record_for_torch_elastic(error)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
