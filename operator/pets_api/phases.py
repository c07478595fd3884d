"""A PetsTrainingJob's phases (the CRD's enum for status.phase)."""

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
SUSPENDED = "Suspended"  # a job's phase only (spec.suspend): its pods are deleted until it is resumed
PHASES = (PENDING, RUNNING, SUSPENDED, SUCCEEDED, FAILED)
FINAL_PHASES = (SUCCEEDED, FAILED)  # a job, and a pod, in one of these never changes phase again
# Causes that name what went wrong before training: `<Reason>: ...` as the trainer's error line starts
# (pets_trainer.fetch.DataUnavailable, pets_trainer.hub.ModelUnavailable, pets_trainer.function's
# IncompatibleFunction, pets_trainer.checkpoint.CheckpointConflict); a job that fails with one has it as
# its Failed condition's reason. Each is permanent: the job fails at once, without a restart.
FAILURE_REASONS = ("DataUnavailable", "ModelUnavailable", "IncompatibleFunction", "CheckpointConflict")
# `pets-train`'s exit status for an error the user must fix (pets_trainer.errors.report_error): permanent too.
INVALID_INPUT_EXIT_CODE = 2
