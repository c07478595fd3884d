"""pets-trainer: the Accelerate fine-tuning of a Pets classifier that every pod of a PetsTrainingJob runs."""
