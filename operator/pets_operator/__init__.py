"""pets-operator: turns a PetsTrainingJob into a multi-node Accelerate training run."""

GROUP = "training.pets.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PetsTrainingJob"
PLURAL = "petstrainingjobs"
