"""The images built from this repository's Dockerfiles (by .ci/containers in CI) are what the chart runs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from containers import OPERATOR_IMAGE, TRAINER_IMAGE, run_in, unavailable  # noqa: E402

pytestmark = [pytest.mark.container,
              pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))]


@pytest.mark.parametrize("image", [OPERATOR_IMAGE, TRAINER_IMAGE])
def test_runs_as_the_non_root_user_the_pods_ask_for(image):
    result = run_in(image, "id", "-u")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "10001"  # the chart's and the trainer pods' runAsUser


def test_the_trainer_image_has_the_trainer_and_its_libraries():
    imports = run_in(TRAINER_IMAGE, "python", "-c",
                     "import pets_trainer.launch, timm, accelerate, torch, torchvision; print(torch.__version__)")
    assert imports.returncode == 0, imports.stderr
    usage = run_in(TRAINER_IMAGE, "pets-train", "--help")
    assert usage.returncode == 0 and "--model" in usage.stdout, usage.stderr


def test_the_operator_image_has_the_operator_and_no_torch():
    imports = run_in(OPERATOR_IMAGE, "python", "-c", "import pets_operator, kopf, kubernetes, prometheus_client")
    assert imports.returncode == 0, imports.stderr
    assert run_in(OPERATOR_IMAGE, "python", "-c", "import torch").returncode != 0
    usage = run_in(OPERATOR_IMAGE, "pets-operator", "run", "--help")
    assert usage.returncode == 0, usage.stderr


@pytest.mark.parametrize("image", [OPERATOR_IMAGE, TRAINER_IMAGE])
def test_the_local_cluster_is_not_shipped(image):
    result = run_in(image, "python", "-c", "import pets_localkube")
    assert result.returncode != 0 and "No module named 'pets_localkube'" in result.stderr
