"""Issue 12 end to end: the real operator and the real trainer on the local cluster, the data set and the
pretrained weights downloaded from stand-in hosts on 127.0.0.1 (a data set host and a Hugging Face Hub).

Two pods share one cache volume (a claim): the archive and the weights are downloaded once; the job shows
Initialized; the model it saves holds the served weights (the encoder is frozen) and classifies images."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from http_hosts import FileHost  # noqa: E402
from pets_archive import pets_images, tar_gz_bytes  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MODEL = "resnet10t"
REPOSITORY = "timm/resnet10t.c3_in1k"  # what timm's pretrained config names for resnet10t
ARCHIVE = "/vgg/data/pets/images.tar.gz"


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> bytes:
    """The real archive's layout and quirks (`images/`, capitalised cat breeds, .mat files, odd modes)."""
    root = tmp_path_factory.mktemp("pets-archive")
    pets_images(root, classes=3, images_per_class=12, image_size=32)
    return tar_gz_bytes(root)


@pytest.fixture(scope="module")
def served_weights() -> tuple[bytes, torch.Tensor]:
    import timm
    from safetensors.torch import save

    torch.manual_seed(4321)
    state = timm.create_model(MODEL, pretrained=False).state_dict()
    state["conv1.0.weight"].normal_()  # a tensor no fresh model has
    return save(state), state["conv1.0.weight"].clone()


@pytest.fixture
def hosts():
    server = FileHost()  # one server stands in for both: the data set host and the Hub
    yield server
    server.close()


def gets(host: FileHost, suffix: str) -> int:
    return sum(1 for method, path, _ in host.requests if method == "GET" and path.endswith(suffix))


def job_spec(host: FileHost, checksum: str, **changes) -> dict:
    return {"numNodes": 2, "epochs": 1, "model": MODEL, "pretrained": True, "imageSize": 32, "batchSize": 8,
            "numWorkers": 0, "seed": 7,
            "data": {"download": {"url": host.url + ARCHIVE, "sha256": checksum}, "path": "images"},
            "cache": {"persistentVolumeClaim": {"claimName": "pets-cache"}},
            "hub": {"endpoint": host.url, "offline": False},
            "env": [{"name": "OMP_NUM_THREADS", "value": "1"}], **changes}


def status_of(api, name):
    return (api.job(name) or {}).get("status") or {}


def condition(status, type_):
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def test_two_pods_sharing_a_cache_download_once_and_train_from_the_served_weights(
        api, operator_process, wait_for, hosts, archive, served_weights, tmp_path):
    data, first_conv = served_weights
    hosts.files[ARCHIVE] = archive
    hosts.serve_hub_file(REPOSITORY, "model.safetensors", data)
    output = tmp_path / "model"
    operator = operator_process()
    api.create_job("pets", job_spec(hosts, hashlib.sha256(archive).hexdigest(),
                                    output={"hostPath": str(output), "path": "/output"}))
    seen = []

    def finished():
        status = status_of(api, "pets")
        initialized = condition(status, "Initialized")
        if initialized:
            seen.append((status.get("phase"), initialized["status"], initialized["reason"]))
        return status.get("phase") in ("Succeeded", "Failed") and status

    status = wait_for("the job to finish", finished, 600, operator.logs)
    assert status["phase"] == "Succeeded", status.get("message")
    # One download of each for the two pods: the archive under the claim's lock, the weights in its Hub cache.
    assert (gets(hosts, ARCHIVE), gets(hosts, "/model.safetensors")) == (1, 1), hosts.requests
    initialized = condition(status, "Initialized")
    assert (initialized["status"], initialized["reason"]) == ("True", "Downloaded")
    assert hosts.url + ARCHIVE in initialized["message"] and REPOSITORY in initialized["message"]
    assert all(phase == "Pending" for phase, value, _ in seen if value == "False"), seen
    assert status["output"] == {"path": "/output", "hostPath": str(output)}
    # The frozen encoder kept the served weights: the workers trained from them, not from a fresh model.
    from safetensors.torch import load_file

    assert torch.equal(load_file(str(output / "model.safetensors"))["conv1.0.weight"], first_conv)
    # The saved model is usable as it is: every breed with its probability, for images of the archive's kind.
    import pets_trainer

    probe = pets_images(tmp_path / "probe", classes=3, images_per_class=4, image_size=32)
    predictions = pets_trainer.predict(output, sorted(probe.glob("*.jpg")), top=3)
    assert {label for ranked in predictions for label, _ in ranked} == set(json.loads((output / "labels.json").read_text()))
    assert all(abs(sum(p for _, p in ranked) - 1.0) < 1e-3 for ranked in predictions)


def test_a_wrong_checksum_fails_the_job_with_data_unavailable_naming_the_url(
        api, operator_process, wait_for, hosts, archive):
    hosts.files[ARCHIVE] = archive
    operator = operator_process()
    api.create_job("bad", job_spec(hosts, "0" * 64, numNodes=1, pretrained=False, cache={}))
    status = wait_for("the job to fail",
                      lambda: status_of(api, "bad").get("phase") in ("Succeeded", "Failed") and status_of(api, "bad"),
                      300, operator.logs)
    assert status["phase"] == "Failed"
    assert condition(status, "Failed")["reason"] == "DataUnavailable"
    assert condition(status, "Initialized")["reason"] == "DataUnavailable"
    assert f"{hosts.url}{ARCHIVE}: sha256 is {hashlib.sha256(archive).hexdigest()}, expected {'0' * 64}" \
        in status["message"], status["message"]
