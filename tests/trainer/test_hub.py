"""Pretrained weights the way timm gets them, from a local stand-in for the Hugging Face Hub."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from http_hosts import FileHost  # noqa: E402

pytestmark = pytest.mark.slow  # each test starts a Python that imports torch and timm

MODEL = "resnet10t"
REPOSITORY = "timm/resnet10t.c3_in1k"  # what timm's pretrained config names for resnet10t
FETCH = """
import json, sys
from pets_trainer.hub import fetch_weights
from pets_trainer.errors import TrainerError
seen = []
try:
    report = None if "--no-progress" in sys.argv else lambda done, total: seen.append([done, total])
    path = fetch_weights(sys.argv[1], progress=report)
except TrainerError as error:
    print(json.dumps({"error": str(error)}))
else:
    print(json.dumps({"path": str(path), "progress": seen}))
"""


@pytest.fixture(scope="module")
def served_weights(tmp_path_factory) -> tuple[bytes, torch.Tensor]:
    import timm
    from safetensors.torch import save

    torch.manual_seed(1234)
    state = timm.create_model(MODEL, pretrained=False).state_dict()
    state["fc.weight"].normal_()  # a tensor that a fresh model would not have
    return save(state), state["conv1.0.weight"].clone()


@pytest.fixture
def hub():
    server = FileHost()
    yield server
    server.close()


def fetch(hub, tmp_path, model=MODEL, *args, **env):
    environ = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1",
               "HF_HUB_ETAG_TIMEOUT": "5", "HF_HUB_DOWNLOAD_TIMEOUT": "5", **env}
    environ.pop("HF_HUB_OFFLINE", None) if "HF_HUB_OFFLINE" not in env else None
    result = subprocess.run([sys.executable, "-c", FETCH, model, *args], env=environ, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_weights_come_from_the_hub_repository_timm_names_and_load(hub, tmp_path, served_weights):
    import timm

    data, first_conv = served_weights
    assert timm.models.get_pretrained_cfg(MODEL).hf_hub_id == REPOSITORY
    hub.serve_hub_file(REPOSITORY, "model.safetensors", data)
    result = fetch(hub, tmp_path)
    path = Path(result["path"])
    assert path.read_bytes() == data and str(tmp_path / "hf") in str(path.resolve())
    assert result["progress"][-1] == [len(data), len(data)]
    from pets_trainer.model import create_model

    model = create_model(MODEL, num_classes=3, pretrained=True, weights_file=str(path))
    assert torch.equal(model.state_dict()["conv1.0.weight"], first_conv)
    # A second node-local call (or a restart) uses the cache; offline too.
    gets = [r for r in hub.requests if r[0] == "GET"]
    assert fetch(hub, tmp_path)["path"] == result["path"]
    assert fetch(hub, tmp_path, HF_HUB_OFFLINE="1")["path"] == result["path"]
    assert [r for r in hub.requests if r[0] == "GET"] == gets


def test_a_token_is_sent_and_never_printed(hub, tmp_path, served_weights):
    hub.serve_hub_file(REPOSITORY, "model.safetensors", served_weights[0])
    captured = []
    original = hub.server.RequestHandlerClass.do_GET

    def record(handler):
        captured.append(handler.headers.get("Authorization"))
        original(handler)

    hub.server.RequestHandlerClass.do_GET = record
    result = fetch(hub, tmp_path, HF_TOKEN="hf_secret_test_token")
    assert "path" in result and "hf_secret_test_token" not in json.dumps(result)
    assert "Bearer hf_secret_test_token" in captured


def test_a_missing_repository_names_it(hub, tmp_path):
    result = fetch(hub, tmp_path)
    assert "error" in result
    assert f"{hub.url}/{REPOSITORY}" in result["error"] and "no such repository" in result["error"]


def test_offline_with_an_empty_cache_says_so(hub, tmp_path):
    result = fetch(hub, tmp_path, HF_HUB_OFFLINE="1")
    assert "not in the cache" in result["error"] and "HF_HUB_OFFLINE is set" in result["error"], result
    assert "request failed" not in result["error"]


def test_a_failed_request_is_named_and_offline_mode_only_when_set():
    from huggingface_hub.errors import LocalEntryNotFoundError

    from pets_trainer.hub import not_fetched_reason

    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as connection_error:
            raise LocalEntryNotFoundError("An error happened while trying to locate the file") from connection_error
    except LocalEntryNotFoundError as error:
        assert not_fetched_reason(error, offline=False) == (
            "the Hub request failed: ConnectionRefusedError: [Errno 111] Connection refused")
        assert not_fetched_reason(error, offline=True) == "HF_HUB_OFFLINE is set, so nothing is downloaded"


@pytest.mark.slow
def test_an_unreachable_endpoint_gives_the_connection_error(tmp_path):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]

    class Closed:
        url = f"http://127.0.0.1:{closed}"

    # huggingface_hub retries each request for about 20 s: no progress, so no requests for the sizes
    result = fetch(Closed(), tmp_path, MODEL, "--no-progress")
    error = result["error"]
    assert error.startswith(f"ModelUnavailable: {Closed.url}/{REPOSITORY}: model.safetensors / pytorch_model.bin "
                            "not in the cache"), error
    assert "the Hub request failed: ConnectError:" in error and "Connection refused" in error, error
    assert "HF_HUB_OFFLINE" not in error, "it was not set"


def test_unknown_model(hub, tmp_path):
    assert "unknown timm model 'resnet5'" in fetch(hub, tmp_path, model="resnet5")["error"]
