"""The model: local-file pretrained weights only, frozen encoder, and the no_grad encoder keeping the math."""
from __future__ import annotations

import copy

import pytest
import timm
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from pets_trainer.errors import ConfigError
from pets_trainer.model import FrozenEncoderClassifier, create_model, freeze_encoder, normalization


@pytest.fixture
def no_hub(monkeypatch):
    """Any attempt to download weights fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("tried to download weights")

    import timm.models._builder as builder

    for name in ("load_state_dict_from_hf", "load_state_dict_from_url", "download_cached_file", "load_custom_from_hf"):
        monkeypatch.setattr(builder, name, refuse)


def test_pretrained_weights_load_from_a_local_file_without_the_hub(tmp_path, no_hub):
    source = timm.create_model("resnet10t", pretrained=False)  # 1000 classes, like published weights
    weights = tmp_path / "resnet10t.safetensors"
    save_file(source.state_dict(), str(weights))
    model = create_model("resnet10t", num_classes=3, pretrained=True, weights_file=str(weights))
    assert torch.equal(model.conv1[0].weight, source.conv1[0].weight)
    assert torch.equal(model.layer4[0].conv1.weight, source.layer4[0].conv1.weight)
    assert model.get_classifier().out_features == 3


def test_not_pretrained_builds_a_random_model_offline(no_hub):
    model = create_model("resnet10t", num_classes=5)
    assert model.get_classifier().out_features == 5


def test_pretrained_without_a_file_is_refused(tmp_path, no_hub):
    with pytest.raises(ConfigError, match="nothing is downloaded"):
        create_model("resnet10t", num_classes=2, pretrained=True)
    with pytest.raises(ConfigError, match="weights file .*missing.safetensors does not exist"):
        create_model("resnet10t", num_classes=2, pretrained=True, weights_file=str(tmp_path / "missing.safetensors"))


def test_weights_of_another_architecture_are_a_clear_error(tmp_path, no_hub):
    weights = tmp_path / "other.safetensors"
    save_file(timm.create_model("resnet18d", pretrained=False).state_dict(), str(weights))
    with pytest.raises(ConfigError, match="cannot load pretrained weights for resnet10t"):
        create_model("resnet10t", num_classes=2, pretrained=True, weights_file=str(weights))


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown timm model 'resnet9000'"):
        create_model("resnet9000", num_classes=2)


def test_only_the_classifier_trains():
    model = create_model("resnet10t", num_classes=4)
    freeze_encoder(model)
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    assert trainable == {"fc.weight", "fc.bias"}


def test_normalization_comes_from_the_model_config():
    model = create_model("resnet10t", num_classes=2)
    mean, std = normalization(model, torch.device("cpu"))
    assert mean.shape == std.shape == (1, 3, 1, 1)
    assert mean.flatten().tolist() == pytest.approx(list(model.pretrained_cfg["mean"]))
    assert std.flatten().tolist() == pytest.approx(list(model.pretrained_cfg["std"]))


def one_adam_step(wrapper: FrozenEncoderClassifier, images, labels):
    optimizer = torch.optim.Adam(wrapper.parameters(), lr=1e-2)
    wrapper.train()
    loss = F.cross_entropy(wrapper(images), labels)
    loss.backward()
    gradient = wrapper.model.fc.weight.grad.clone()
    optimizer.step()
    return loss.item(), gradient, copy.deepcopy(wrapper.state_dict())


@pytest.mark.slow  # a real training step of resnet10t, twice: the heaviest test outside the slow tier otherwise
@pytest.mark.parametrize("channels_last", [False, True])
def test_no_grad_encoder_gives_the_same_loss_gradient_and_update(channels_last):
    torch.manual_seed(0)
    base = create_model("resnet10t", num_classes=3)
    freeze_encoder(base)
    images = torch.rand(4, 3, 32, 32)
    labels = torch.tensor([0, 1, 2, 1])
    if channels_last:
        base = base.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)
    plain = one_adam_step(FrozenEncoderClassifier(copy.deepcopy(base), encoder_no_grad=False), images, labels)
    fast = one_adam_step(FrozenEncoderClassifier(copy.deepcopy(base), encoder_no_grad=True), images, labels)
    assert fast[0] == pytest.approx(plain[0], abs=1e-6)
    torch.testing.assert_close(fast[1], plain[1])
    assert plain[2].keys() == fast[2].keys()
    for key in plain[2]:  # classifier, frozen weights and BatchNorm running statistics alike
        torch.testing.assert_close(fast[2][key], plain[2][key])
