"""A PetsTrainingJob's phases (the CRD's enum for status.phase)."""

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
SUSPENDED = "Suspended"  # a job's phase only (spec.suspend): its pods are deleted until it is resumed
PHASES = (PENDING, RUNNING, SUSPENDED, SUCCEEDED, FAILED)
FINAL_PHASES = (SUCCEEDED, FAILED)  # a job, and a pod, in one of these never changes phase again
# Causes that name what went wrong before training: `<Reason>: ...` as the trainer's error line starts
# (pets_trainer.fetch.DataUnavailable, pets_trainer.hub.ModelUnavailable, pets_trainer.function's
# IncompatibleFunction); a job that fails with one has it as its Failed condition's reason.
FAILURE_REASONS = ("DataUnavailable", "ModelUnavailable", "IncompatibleFunction")
