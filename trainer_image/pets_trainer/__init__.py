"""pets-trainer: the Accelerate fine-tuning of a Pets classifier that every pod of a PetsTrainingJob runs."""
from .export import predict  # noqa: F401  - `pets_trainer.predict(output_dir, images)`: a job's saved model in use
from .reporting import report  # noqa: F401  - `pets_trainer.report(epoch=..., accuracy=...)` in shipped functions
