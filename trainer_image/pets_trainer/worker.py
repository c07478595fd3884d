"""The module `accelerate launch` runs in every training process: `python -m pets_trainer.worker --config JSON`."""
from __future__ import annotations

import argparse
import sys

from .config import TrainConfig
from .errors import TrainerError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pets_trainer.worker", description=__doc__)
    parser.add_argument("--config", required=True, help="the TrainConfig as JSON (written by pets-train)")
    args = parser.parse_args(argv)
    try:
        from .train import training_loop

        training_loop(TrainConfig.from_json(args.config))
    except TrainerError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
