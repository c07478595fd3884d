"""pets-operator: the controller that turns a PetsTrainingJob into a multi-node Accelerate training run.

The API it serves (group, version, kind, the pod contract) is `pets_api`.
"""
