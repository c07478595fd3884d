"""Trainer throughput: the project's trainer vs. a plain re-typing of the tutorial's loop.

Everything runs side by side in one invocation on the same generated data:
  1. baseline (the tutorial's loop, num_workers=4) vs. the trainer with every speed choice on:
     train and eval images/second, the ratio, and accuracy after the same epochs;
  2. ablation: the trainer with each speed choice turned off in turn (its share);
  3. scaling: `pets-train` with 1 process vs. 2 processes (gloo on CPU), parallel efficiency.

    python benchmarks/trainer_throughput.py                 # defaults: see --help (~5-10 min on 2 cores)
    python benchmarks/trainer_throughput.py --tiny          # seconds: a smoke run

It is a script, not a test: the figures depend on the machine. See docs/performance-trainer.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import timm
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import set_seed
from PIL import Image
from torch.optim.lr_scheduler import OneCycleLR
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import Compose, RandomResizedCrop, Resize, ToTensor

from pets_trainer.config import TrainConfig
from pets_trainer.metrics import parse_metric_lines
from pets_trainer.synthetic import generate_synthetic_pets
from pets_trainer.train import training_loop

# Each ablation turns one speed choice off.
ABLATIONS = {
    "no draft decode": dict(draft_decode=False),
    "no persistent workers": dict(persistent_workers=False),
    "no channels_last": dict(channels_last=False),
    "no no_grad encoder": dict(frozen_encoder_no_grad=False),
}


@dataclass
class Measurement:
    name: str
    train_images: int
    eval_images: int
    train_seconds: float
    eval_seconds: float
    accuracy: float

    @property
    def train_rate(self) -> float:
        return self.train_images / self.train_seconds

    @property
    def eval_rate(self) -> float:
        return self.eval_images / self.eval_seconds


# --- the baseline: the tutorial's code, re-typed, with only its constants made arguments -------


class TutorialPetsDataset(Dataset):
    def __init__(self, file_names, image_transform=None, label_to_id=None):
        self.file_names = file_names
        self.image_transform = image_transform
        self.label_to_id = label_to_id

    def __len__(self):
        return len(self.file_names)

    def __getitem__(self, idx):
        fname = self.file_names[idx]
        raw_image = Image.open(fname)
        image = raw_image.convert("RGB")
        if self.image_transform is not None:
            image = self.image_transform(image)
        label = extract_label(fname)
        if self.label_to_id is not None:
            label = self.label_to_id[label]
        return {"image": image, "label": label}


def extract_label(fname):
    stem = fname.split(os.path.sep)[-1]
    return re.search(r"^(.*)_\d+\.jpg$", stem).groups()[0]


def tutorial_dataloaders(data_dir, batch_size, image_size, num_workers):
    fnames = [os.path.join(data_dir, fname) for fname in sorted(os.listdir(data_dir)) if fname.endswith(".jpg")]
    all_labels = [extract_label(fname) for fname in fnames]
    id_to_label = list(sorted(set(all_labels)))
    label_to_id = {lbl: i for i, lbl in enumerate(id_to_label)}
    random_perm = np.random.permutation(len(fnames))
    cut = int(0.8 * len(fnames))
    train_split = random_perm[:cut]
    eval_split = random_perm[cut:]
    train_tfm = Compose([RandomResizedCrop((image_size, image_size), scale=(0.5, 1.0)), ToTensor()])
    train_dataset = TutorialPetsDataset([fnames[i] for i in train_split], image_transform=train_tfm, label_to_id=label_to_id)
    eval_tfm = Compose([Resize((image_size, image_size)), ToTensor()])
    eval_dataset = TutorialPetsDataset([fnames[i] for i in eval_split], image_transform=eval_tfm, label_to_id=label_to_id)
    train_dataloader = DataLoader(train_dataset, shuffle=True, batch_size=batch_size, num_workers=num_workers)
    eval_dataloader = DataLoader(eval_dataset, shuffle=False, batch_size=batch_size * 2, num_workers=num_workers)
    return train_dataloader, eval_dataloader, len(id_to_label)


def tutorial_training_loop(data_dir, model_name, image_size, epochs, mixed_precision="no", seed=42, batch_size=64,
                           num_workers=4, max_lr=3e-2):
    set_seed(seed)
    accelerator = Accelerator(mixed_precision=mixed_precision, cpu=not torch.cuda.is_available())
    train_dataloader, eval_dataloader, num_classes = tutorial_dataloaders(data_dir, batch_size, image_size, num_workers)
    model = timm.create_model(model_name, pretrained=False, num_classes=num_classes)
    for param in model.parameters():
        param.requires_grad = False
    for param in model.get_classifier().parameters():
        param.requires_grad = True
    model = model.to(accelerator.device)
    mean = torch.tensor(model.default_cfg["mean"])[None, :, None, None].to(accelerator.device)
    std = torch.tensor(model.default_cfg["std"])[None, :, None, None].to(accelerator.device)
    optimizer = torch.optim.Adam(params=model.parameters(), lr=max_lr / 25)
    lr_scheduler = OneCycleLR(optimizer=optimizer, max_lr=max_lr, epochs=epochs, steps_per_epoch=len(train_dataloader))
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    train_seconds = eval_seconds = 0.0
    for epoch in range(epochs):
        started = time.perf_counter()
        model.train()
        for batch in train_dataloader:
            inputs = (batch["image"] - mean) / std
            outputs = model(inputs)
            loss = F.cross_entropy(outputs, batch["label"])
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        train_seconds += time.perf_counter() - started
        started = time.perf_counter()
        model.eval()
        accurate = 0
        num_elems = 0
        for batch in eval_dataloader:
            inputs = (batch["image"] - mean) / std
            with torch.no_grad():
                outputs = model(inputs)
            predictions = outputs.argmax(dim=-1)
            accurate_preds = accelerator.gather(predictions) == accelerator.gather(batch["label"])
            num_elems += accurate_preds.shape[0]
            accurate += accurate_preds.long().sum()
        eval_metric = accurate.item() / num_elems
        eval_seconds += time.perf_counter() - started
        accelerator.print(f"epoch {epoch}: {100 * eval_metric:.2f}")
    accelerator.end_training()
    return train_seconds, eval_seconds, eval_metric, len(train_dataloader.dataset), len(eval_dataloader.dataset)


# --- measurements ----------------------------------------------------------------------------------


def reset_accelerate() -> None:
    AcceleratorState._reset_state(True)


def measure_baseline(args, data_dir: Path) -> Measurement:
    reset_accelerate()
    train_s, eval_s, accuracy, n_train, n_eval = tutorial_training_loop(
        str(data_dir), args.model, args.image_size, args.epochs, seed=args.seed, batch_size=args.batch_size,
        num_workers=args.num_workers,
    )
    return Measurement("tutorial baseline", n_train * args.epochs, n_eval * args.epochs, train_s, eval_s, accuracy)


def trainer_config(args, data_dir: Path) -> TrainConfig:
    return TrainConfig(data_dir=str(data_dir), model=args.model, image_size=args.image_size, epochs=args.epochs,
                       seed=args.seed, batch_size=args.batch_size, num_workers=args.num_workers)


def measure_trainer(args, data_dir: Path, name: str, **switches) -> Measurement:
    reset_accelerate()
    config = trainer_config(args, data_dir).replace(**switches)
    result = training_loop(config)
    split_train = int(0.8 * len(list(data_dir.glob("*.jpg"))))
    split_eval = len(list(data_dir.glob("*.jpg"))) - split_train
    return Measurement(
        name, split_train * args.epochs, split_eval * args.epochs,
        sum(r.train_seconds for r in result.history), sum(r.eval_seconds for r in result.history),
        result.accuracy,
    )


def measure_processes(args, data_dir: Path, processes: int, threads: int) -> Measurement:
    """`pets-train` on this machine with `processes` processes of `threads` torch threads each."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUM_MACHINES", "MACHINE_RANK", "MASTER_ADDR", "WORLD_SIZE")}
    env.update(OMP_NUM_THREADS=str(threads), NPROC_PER_NODE=str(processes), MASTER_PORT=str(free_port()))
    config = trainer_config(args, data_dir)
    command = [str(Path(sys.executable).parent / "pets-train"), "--data-dir", config.data_dir, "--model", config.model,
               "--image-size", str(config.image_size), "--epochs", str(config.epochs), "--seed", str(config.seed),
               "--batch-size", str(config.batch_size), "--num-workers", str(args.scaling_workers)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"pets-train with {processes} process(es) failed:\n{done.stderr[-3000:]}")
    epochs = [event for event in parse_metric_lines(done.stdout) if event["event"] == "epoch"]
    total = len(list(data_dir.glob("*.jpg")))
    n_train, n_eval = int(0.8 * total), total - int(0.8 * total)
    return Measurement(f"{processes} process(es) x {threads} thread(s)", n_train * len(epochs), n_eval * len(epochs),
                       sum(e["train_seconds"] for e in epochs), sum(e["eval_seconds"] for e in epochs),
                       epochs[-1]["accuracy"])


def min_seconds(action, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def micro_benchmarks(args, data_dir: Path) -> dict:
    """Each speed choice in isolation, repeated and the minimum kept: far less noisy than whole runs."""
    from pets_trainer.data import PetsDataset, eval_transform, train_draft_size, train_transform
    from pets_trainer.model import FrozenEncoderClassifier, freeze_encoder

    config = trainer_config(args, data_dir)
    files = sorted(data_dir.glob("*.jpg"))[:64]
    results = {}
    for phase, transform, draft in (("train", train_transform(config), train_draft_size(config)),
                                    ("eval", eval_transform(config), config.image_size)):
        for label, draft_size in (("full decode", None), ("draft decode", draft)):
            dataset = PetsDataset(files, [0] * len(files), transform, draft_size)
            seconds = min_seconds(lambda: [dataset[i] for i in range(len(dataset))], repeats=3)
            results[f"{phase} image load ({label}) ms/image"] = 1000 * seconds / len(files)

    torch.manual_seed(0)
    images = torch.rand(args.batch_size, 3, args.image_size, args.image_size)
    labels = torch.randint(0, args.classes, (args.batch_size,))
    for channels_last in (False, True):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        for no_grad in (False, True):
            model = timm.create_model(args.model, pretrained=False, num_classes=args.classes)
            freeze_encoder(model)
            wrapper = FrozenEncoderClassifier(model.to(memory_format=fmt), encoder_no_grad=no_grad).train()
            optimizer = torch.optim.Adam(wrapper.parameters(), lr=1e-3)
            batch = images.contiguous(memory_format=fmt)

            def step():
                loss = F.cross_entropy(wrapper(batch), labels)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()

            step()  # warm-up
            name = f"train step ({'channels_last' if channels_last else 'contiguous'}, {'no_grad encoder' if no_grad else 'plain'})"
            results[name + " ms/image"] = 1000 * min_seconds(step, repeats=6) / args.batch_size
        wrapper.eval()
        with torch.no_grad():
            wrapper(batch)
            eval_seconds = min_seconds(lambda: wrapper(batch), repeats=6)
        results[f"eval forward ({'channels_last' if channels_last else 'contiguous'}) ms/image"] = 1000 * eval_seconds / args.batch_size
    return results


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def best_of(runs: list[Measurement]) -> Measurement:
    """The fastest train and eval time seen: other load on the machine only ever slows a run down."""
    first = runs[0]
    return Measurement(first.name, first.train_images, first.eval_images, min(r.train_seconds for r in runs),
                       min(r.eval_seconds for r in runs), first.accuracy)


def interleaved(measurements: dict, repeats: int) -> dict[str, Measurement]:
    """Run each measurement `repeats` times, round-robin, so drifting machine load hits all alike."""
    runs = {name: [] for name in measurements}
    for round_number in range(repeats):
        for name, measure in measurements.items():
            print(f"-- round {round_number + 1}/{repeats}: {name}", flush=True)
            runs[name].append(measure())
    return {name: best_of(found) for name, found in runs.items()}


def table(rows: list[Measurement], reference: Measurement) -> str:
    lines = [f"{'run':<34} {'train img/s':>11} {'eval img/s':>10} {'train x':>8} {'eval x':>7} {'accuracy':>8}"]
    for row in rows:
        lines.append(
            f"{row.name:<34} {row.train_rate:>11.1f} {row.eval_rate:>10.1f} {row.train_rate / reference.train_rate:>8.2f}"
            f" {row.eval_rate / reference.eval_rate:>7.2f} {row.accuracy:>8.3f}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18d", help="timm model (resnet18d; the trainer's default is resnet50d)")
    parser.add_argument("--image-size", type=int, default=128, help="model input side (128; the tutorial uses 224)")
    parser.add_argument("--source-size", type=int, default=384, help="side of the generated JPEGs (384)")
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--images-per-class", type=int, default=48)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=4, help="loader workers for baseline and trainer (4, the tutorial's)")
    parser.add_argument("--scaling-workers", type=int, default=1, help="loader workers per process in the scaling runs (1)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per configuration; best is kept (3)")
    parser.add_argument("--scaling-repeats", type=int, default=2, help="repeats of the 1 vs 2 processes runs (2)")
    parser.add_argument("--no-scaling", action="store_true", help="skip the 1 vs 2 processes runs")
    parser.add_argument("--no-micro", action="store_true", help="skip the per-choice micro benchmarks")
    parser.add_argument("--no-ablation", action="store_true", help="skip the ablation runs")
    parser.add_argument("--tiny", action="store_true", help="smallest settings, for a smoke test")
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    if args.tiny:
        args.model, args.image_size, args.source_size = "resnet10t", 32, 64
        args.classes, args.images_per_class, args.epochs, args.batch_size, args.num_workers = 2, 8, 1, 8, 1
        args.repeats, args.scaling_repeats = 1, 1

    settings = {k: v for k, v in vars(args).items() if k not in ("json",)}
    print("settings:", json.dumps(settings, default=str), flush=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"device {'cuda' if torch.cuda.is_available() else 'cpu'}", flush=True)
    report: dict = {"settings": settings}
    with tempfile.TemporaryDirectory(prefix="pets-bench-") as workdir:
        data_dir = Path(workdir) / "images"
        generate_synthetic_pets(data_dir, args.classes, args.images_per_class, args.source_size, seed=args.seed)

        if not args.no_micro:
            micro = micro_benchmarks(args, data_dir)
            print("\n== each choice in isolation (min of repeats; lower is better) ==", flush=True)
            for name, value in micro.items():
                print(f"{name:<60} {value:8.2f}", flush=True)
            report["micro"] = micro

        measurements = {
            "baseline": lambda: measure_baseline(args, data_dir),
            "trainer": lambda: measure_trainer(args, data_dir, "trainer (all speed choices)"),
        }
        if not args.no_ablation:
            for name, switches in ABLATIONS.items():
                measurements[name] = lambda name=name, switches=switches: measure_trainer(args, data_dir, name, **switches)
        best = interleaved(measurements, args.repeats)
        baseline, trainer = best.pop("baseline"), best.pop("trainer")
        print("\n== baseline vs trainer (x = relative to the baseline) ==\n" + table([baseline, trainer], baseline), flush=True)
        report["baseline"], report["trainer"] = vars(baseline), vars(trainer)
        if best:
            ablated = list(best.values())
            print("\n== ablation (each choice off in turn; x = relative to the trainer with all on) ==\n"
                  + table([trainer, *ablated], trainer), flush=True)
            report["ablation"] = [vars(row) for row in ablated]
        if not torch.cuda.is_available():
            print("pin_memory and mixed precision: used only on a GPU, so not measured on this CPU", flush=True)

        if not args.no_scaling:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
            threads = max(1, cpus // 2)
            scaling = interleaved({
                "one": lambda: measure_processes(args, data_dir, processes=1, threads=threads),
                "two": lambda: measure_processes(args, data_dir, processes=2, threads=threads),
            }, args.scaling_repeats)
            one, two = scaling["one"], scaling["two"]
            efficiency = two.train_rate / (2 * one.train_rate)
            print("\n== scaling (pets-train, gloo on CPU; x = relative to 1 process) ==\n" + table([one, two], one), flush=True)
            print(f"parallel efficiency (train): {efficiency:.2f}", flush=True)
            report["scaling"] = {"one": vars(one), "two": vars(two), "train_efficiency": efficiency}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
