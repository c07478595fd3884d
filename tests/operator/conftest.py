from __future__ import annotations

import pytest

from pets_operator.spec import with_defaults


@pytest.fixture
def job():
    return {"apiVersion": "training.pets.dev/v1alpha1", "kind": "PetsTrainingJob",
            "metadata": {"name": "pets", "namespace": "ml", "uid": "uid-1", "generation": 1}}


@pytest.fixture
def spec():
    return with_defaults({"numNodes": 2, "processesPerNode": 2, "epochs": 3, "model": "resnet10t",
                          "data": {"synthetic": {"classes": 3}}}, "pets-trainer:0.1.0")
