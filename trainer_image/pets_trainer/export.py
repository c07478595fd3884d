"""The trained model out and back in: `model.safetensors`, `config.json`, `labels.json`; `predict`.

The main process writes the three files into the output directory (`OUTPUT_DIR`, spec.output)
after each epoch that is the best so far, so the directory always holds the best model and a
run that stops early leaves the best one it had. Each file is written atomically; `model.safetensors`
last, so a reader that finds the weights finds the config and labels of the same save. The files are
mode 0644 and the directories `save_model` creates 0755, whatever the umask: a serving pod or a
notebook running under another uid reads them.

`config.json`: the timm model name, the image size, the normalization (mean, std), the epoch and
its accuracy; `labels.json`: the class names in label-id order. `predict(output_dir, images)`
loads them (no network: the weights are the file) and returns each image's breeds with their
probabilities, using the eval transform (resize to the image size, normalize); it raises ConfigError
naming the first image it cannot read. `pets-train predict DIR IMAGE...` prints the same as JSON
lines, one per image in order; an image it cannot read is reported on its line (`"error"`) and on
stderr, and the others are still classified. Exit status 0 when at least one image was classified,
2 when none could be (or DIR holds no model).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .atomic import write_atomically
from .errors import ConfigError, TrainerError, report_error

MODEL_FILE, CONFIG_FILE, LABELS_FILE = "model.safetensors", "config.json", "labels.json"
FILE_MODE, DIRECTORY_MODE = 0o644, 0o755  # readable by any uid; only the trainer's writes


def make_readable_directory(path: Path) -> None:
    """Create `path` and its missing parents with DIRECTORY_MODE; an existing directory (a volume's root,
    perhaps not ours) is left as it is."""
    missing = [directory for directory in (path, *path.parents) if not directory.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for directory in missing:
        os.chmod(directory, DIRECTORY_MODE)


def save_model(output_dir: str | Path, model, model_name: str, image_size: int, classes: Sequence[str],
               epoch: int | None = None, accuracy: float | None = None) -> Path:
    """Write `model` (a timm model, its classifier trained) with its config and labels into `output_dir`."""
    from safetensors.torch import save

    output = Path(output_dir)
    make_readable_directory(output)
    cfg = model.pretrained_cfg
    config = {"model": model_name, "image_size": image_size, "num_classes": len(classes),
              "mean": list(cfg["mean"]), "std": list(cfg["std"]), "epoch": epoch, "accuracy": accuracy}
    state = {name: tensor.detach().to("cpu").contiguous() for name, tensor in model.state_dict().items()}
    write_atomically(output / LABELS_FILE, lambda stream: stream.write(json.dumps(list(classes)).encode()), FILE_MODE)
    write_atomically(output / CONFIG_FILE, lambda stream: stream.write(json.dumps(config, indent=1).encode()),
                     FILE_MODE)
    data = save(state, metadata={"format": "pt"})
    write_atomically(output / MODEL_FILE, lambda stream: stream.write(data), FILE_MODE)
    return output


def load_model(output_dir: str | Path) -> tuple[Any, dict[str, Any], list[str]]:
    """(the timm model in eval mode, its config, its labels) from a directory `save_model` wrote."""
    import timm
    from safetensors.torch import load_file

    output = Path(output_dir)
    try:
        config = json.loads((output / CONFIG_FILE).read_text())
        labels = json.loads((output / LABELS_FILE).read_text())
        state = load_file(str(output / MODEL_FILE))
    except (OSError, ValueError) as error:
        raise ConfigError(f"{output} holds no saved model ({MODEL_FILE}, {CONFIG_FILE}, {LABELS_FILE}): {error}") from None
    model = timm.create_model(config["model"], pretrained=False, num_classes=len(labels))
    model.load_state_dict(state)
    return model.eval(), config, labels


@dataclass(frozen=True)
class Prediction:
    """One image's most likely breeds, or why it could not be read."""
    image: str
    ranked: list[tuple[str, float]] | None = None
    error: str | None = None


def predict_each(output_dir: str | Path, images: Sequence[str | Path], top: int = 3) -> Iterator[Prediction]:
    """A Prediction per image, in order: an image that cannot be read gets its error, and the next one is tried."""
    import torch
    from torchvision.transforms import ToTensor

    from .data import DecodeSteps
    from .image_index import UNREADABLE_IMAGE_ERRORS

    model, config, labels = load_model(output_dir)
    decode = DecodeSteps(resize=int(config["image_size"]))  # the eval transform: Resize, ToTensor, normalize
    mean = torch.tensor(config["mean"])[:, None, None]
    std = torch.tensor(config["std"])[:, None, None]
    with torch.no_grad():
        for path in images:
            try:
                tensor = (ToTensor()(decode(Path(path))) - mean) / std
            except UNREADABLE_IMAGE_ERRORS as error:
                yield Prediction(str(path), error=f"cannot read image {path}: {' '.join(str(error).split())}")
                continue
            probabilities = model(tensor[None]).softmax(dim=-1)[0]
            best = probabilities.topk(min(top, len(labels)))
            yield Prediction(str(path), ranked=[(labels[i], round(float(p), 6))
                                                for p, i in zip(best.values.tolist(), best.indices.tolist())])


def predict(output_dir: str | Path, images: Sequence[str | Path], top: int = 3) -> list[list[tuple[str, float]]]:
    """For each image, its `top` most likely breeds with their probabilities, most likely first."""
    results = []
    for prediction in predict_each(output_dir, images, top):
        if prediction.error:
            raise ConfigError(prediction.error)
        results.append(prediction.ranked)
    return results


def main(argv: list[str] | None = None) -> int:
    """`pets-train predict DIR IMAGE...`: one JSON line per image, in order."""
    parser = argparse.ArgumentParser(prog="pets-train predict", description=predict.__doc__)
    parser.add_argument("model_dir", help="the job's output directory (spec.output)")
    parser.add_argument("images", nargs="+")
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args(argv)
    classified = 0
    try:
        for prediction in predict_each(args.model_dir, args.images, top=args.top):
            if prediction.error:
                print(json.dumps({"image": prediction.image, "error": prediction.error}), flush=True)
                print(f"error: {prediction.error}", file=sys.stderr, flush=True)
                continue
            classified += 1
            print(json.dumps({"image": prediction.image, "predictions": [
                {"label": label, "probability": p} for label, p in prediction.ranked]}), flush=True)
    except TrainerError as error:
        return report_error(error)
    return 0 if classified else 2


if __name__ == "__main__":
    sys.exit(main())
