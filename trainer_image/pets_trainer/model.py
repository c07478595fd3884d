"""The timm model, its frozen encoder and trainable classifier; weights only from local files."""
from __future__ import annotations

import os
from pathlib import Path

import timm
import torch
from torch import nn

from .errors import ConfigError

# Belt and braces: even a pretrained config that names a hub repository must never download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def create_model(name: str, num_classes: int, pretrained: bool = False, weights_file: str | None = None) -> nn.Module:
    """`timm.create_model(name, pretrained=..., num_classes=...)`, pretrained weights from `weights_file`.

    timm drops the file's classifier when its class count differs, as with hub weights.
    """
    if not timm.is_model(name):
        raise ConfigError(f"unknown timm model {name!r} (see timm.list_models())")
    options = {}
    if pretrained:
        if not weights_file:
            raise ConfigError("pretrained needs a local weights file (PRETRAINED_WEIGHTS): nothing is downloaded "
                              "here (pets-train fetches the Hub's before the workers start)")
        if not Path(weights_file).is_file():
            raise ConfigError(f"pretrained weights file {weights_file} does not exist")
        options["pretrained_cfg_overlay"] = dict(file=str(weights_file))
    try:
        return timm.create_model(name, pretrained=pretrained, num_classes=num_classes, **options)
    except (RuntimeError, ValueError, KeyError) as error:
        raise ConfigError(f"cannot load pretrained weights for {name} from {weights_file}: {error}") from None


def freeze_encoder(model: nn.Module) -> None:
    """The tutorial's freezing: nothing trains but the classifier."""
    for parameter in model.parameters():
        parameter.requires_grad = False
    for parameter in model.get_classifier().parameters():
        parameter.requires_grad = True


def normalization(model: nn.Module, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std from the model's config, shaped to broadcast over NCHW batches."""
    cfg = model.pretrained_cfg
    mean = torch.tensor(cfg["mean"])[None, :, None, None].to(device)
    std = torch.tensor(cfg["std"])[None, :, None, None].to(device)
    return mean, std


class FrozenEncoderClassifier(nn.Module):
    """Runs a timm model; with `encoder_no_grad` the frozen encoder runs under `torch.no_grad()`.

    The encoder's parameters get no gradient either way, so the classifier's gradient and every
    update are the same; no_grad only spares recording the encoder's graph and walking it back.
    """

    def __init__(self, model: nn.Module, encoder_no_grad: bool = True):
        super().__init__()
        self.model = model
        self.encoder_no_grad = encoder_no_grad

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if not self.encoder_no_grad:
            return self.model(images)
        with torch.no_grad():
            features = self.model.forward_features(images)
        return self.model.forward_head(features)
