"""The PetsTrainingJob API shared by the controller, the trainer, the SDK and the local cluster.

Standard library and PyYAML only: the trainer image ships this package and nothing else of the
operator. It holds the group/version/kind, the pod contract table, the metric line format, the
function payload format, the packaged CRD, phases, quantities, name rules and owner references.
"""

GROUP = "training.pets.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PetsTrainingJob"
PLURAL = "petstrainingjobs"
