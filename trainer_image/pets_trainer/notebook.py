"""The notebook path: run `training_loop` through `accelerate.notebook_launcher`.

    from pets_trainer.notebook import launch_in_notebook
    launch_in_notebook(num_processes=2, data_dir="images", model="resnet50d", epochs=5)

As the tutorial warns, nothing in the notebook may touch CUDA before this call (CUDA cannot be
initialised again in the forked processes). This module touches no CUDA itself, and the
training code (which picks the device) runs only inside the launched processes.
"""
from __future__ import annotations

from pets_api.contract import option_defaults

from .config import TrainConfig


def notebook_training_function(config_json: str) -> None:
    """What each launched process runs. Takes JSON so the arguments pickle and fork trivially."""
    from .train import training_loop

    training_loop(TrainConfig.from_json(config_json))


def launch_in_notebook(
    config: TrainConfig | None = None,
    num_processes: int = 1,
    use_port: int | str | None = None,  # None: the CRD's masterPort default
    **overrides,
) -> None:
    """`notebook_launcher(training function, (config,), num_processes=N)`; metrics print as in a pod.

    `overrides` are TrainConfig fields (data_dir=..., epochs=..., model=...).
    """
    from accelerate import notebook_launcher

    config = (config or TrainConfig()).replace(**overrides)
    notebook_launcher(
        notebook_training_function,
        args=(config.to_json(),),
        num_processes=num_processes,
        mixed_precision=config.mixed_precision,
        use_port=str(use_port or option_defaults()["main_process_port"]),
    )
