"""Trainer throughput: the project's trainer vs. a plain re-typing of the tutorial's loop.

Everything runs side by side in one invocation on the same generated data:
  1. baseline (the tutorial's loop, num_workers=4) vs. the trainer with every speed choice on:
     train and eval images/second, the ratio, and accuracy after the same epochs;
  2. ablation: the trainer with each speed choice turned off in turn (its share);
  3. scaling: `pets-train` with 1 process vs. 2 processes (gloo on CPU), parallel efficiency.

    python benchmarks/trainer_throughput.py                 # the tutorial's model and input size (12 min on 2 cores, one ablation, no micro/scaling)
    python benchmarks/trainer_throughput.py --quick         # resnet18d at 128 px (14 min likewise; every ablation: about 3x as long)
    python benchmarks/trainer_throughput.py --tiny          # seconds: a smoke run
    python benchmarks/trainer_throughput.py --mixed-precision bf16   # both sides in bf16: on a GPU, or a CPU with AVX512-BF16 or AMX

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
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import timm
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from PIL import Image
from torch.optim.lr_scheduler import OneCycleLR
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import Compose, RandomResizedCrop, Resize, ToTensor

from pets_trainer.allocator import keep_freed_memory
from pets_trainer.config import MIXED_PRECISION_CHOICES, TrainConfig
from pets_trainer.data import PetsDataset, eval_decode_steps, eval_transform, train_decode_steps, train_transform
from pets_trainer.image_cache import ImageCache
from pets_trainer.metrics import parse_metric_lines
from pets_trainer.model import FrozenEncoderClassifier, freeze_encoder
from pets_trainer.synthetic import generate_synthetic_pets
from pets_trainer.train import supported_mixed_precision, training_loop

# Each ablation turns one speed choice off.
ABLATIONS = {
    "no draft decode": dict(draft_decode=False),
    "no image cache": dict(image_cache=False),
    "no persistent workers": dict(persistent_workers=False),
    "no channels_last": dict(channels_last=False),
    "no keep freed memory": dict(keep_freed_memory=False),
    "no no_grad encoder": dict(frozen_encoder_no_grad=False),
    "no low-priority workers": dict(low_priority_workers=False),
    "no mixed precision": dict(mixed_precision="no"),  # with --mixed-precision: what it buys
}


@dataclass
class Measurement:
    """Seconds per epoch; images per second over all epochs, and over the last one alone.

    The first epoch carries one-time costs (loader workers starting, the first pass over each batch
    shape); the last is what every further epoch of a longer run looks like. `run_seconds`: the whole
    measurement as a user waits for it, from starting the process (imports, model, data) to its end.
    `accuracies`: one per round (each round trains with another seed, see `interleaved`).
    """

    name: str
    train_images_per_epoch: int
    eval_images_per_epoch: int
    train_seconds: list[float]
    eval_seconds: list[float]
    accuracy: float
    run_seconds: float | None = None
    accuracies: list[float] = field(default_factory=list)

    @property
    def train_rate(self) -> float:
        return self.train_images_per_epoch * len(self.train_seconds) / sum(self.train_seconds)

    @property
    def eval_rate(self) -> float:
        return self.eval_images_per_epoch * len(self.eval_seconds) / sum(self.eval_seconds)

    @property
    def last_train_rate(self) -> float:
        return self.train_images_per_epoch / self.train_seconds[-1]

    @property
    def last_eval_rate(self) -> float:
        return self.eval_images_per_epoch / self.eval_seconds[-1]

    def report(self) -> dict:
        return {**vars(self), **{rate: getattr(self, rate) for rate in RATES}}


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
    train_seconds, eval_seconds = [], []
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
        train_seconds.append(time.perf_counter() - started)
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
        eval_seconds.append(time.perf_counter() - started)
        accelerator.print(f"epoch {epoch}: {100 * eval_metric:.2f}")
    accelerator.end_training()
    return train_seconds, eval_seconds, eval_metric, len(train_dataloader.dataset), len(eval_dataloader.dataset)


# --- measurements ----------------------------------------------------------------------------------


def measure_baseline(args, data_dir: Path) -> Measurement:
    train_s, eval_s, accuracy, n_train, n_eval = tutorial_training_loop(
        str(data_dir), args.model, args.image_size, args.epochs, mixed_precision=args.mixed_precision, seed=args.seed,
        batch_size=args.batch_size, num_workers=args.num_workers,
    )
    return Measurement("tutorial baseline", n_train, n_eval, train_s, eval_s, accuracy)


def trainer_config(args, data_dir: Path) -> TrainConfig:
    return TrainConfig(data_dir=str(data_dir), model=args.model, image_size=args.image_size, epochs=args.epochs,
                       seed=args.seed, batch_size=args.batch_size, num_workers=args.num_workers,
                       mixed_precision=args.mixed_precision)


def measure_trainer(args, data_dir: Path, name: str, **switches) -> Measurement:
    config = trainer_config(args, data_dir).replace(**switches)
    result = training_loop(config)
    n_train, n_eval = split_sizes(data_dir)
    return Measurement(name, n_train, n_eval, [r.train_seconds for r in result.history],
                       [r.eval_seconds for r in result.history], result.accuracy)


def split_sizes(data_dir: Path) -> tuple[int, int]:
    total = len(list(data_dir.glob("*.jpg")))
    return int(0.8 * total), total - int(0.8 * total)


def measure_processes(args, data_dir: Path, processes: int, threads: int, seed: int) -> Measurement:
    """`pets-train` on this machine with `processes` processes of `threads` torch threads each."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUM_MACHINES", "MACHINE_RANK", "MASTER_ADDR", "WORLD_SIZE")}
    env.update(OMP_NUM_THREADS=str(threads), NPROC_PER_NODE=str(processes), MASTER_PORT=str(free_port()))
    config = trainer_config(args, data_dir).replace(seed=seed)
    started = time.perf_counter()
    command = [str(Path(sys.executable).parent / "pets-train"), "--data-dir", config.data_dir, "--model", config.model,
               "--image-size", str(config.image_size), "--epochs", str(config.epochs), "--seed", str(config.seed),
               "--batch-size", str(config.batch_size), "--num-workers", str(args.scaling_workers),
               "--mixed-precision", config.mixed_precision]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"pets-train with {processes} process(es) failed:\n{done.stderr[-3000:]}")
    epochs = [event for event in parse_metric_lines(done.stdout) if event["event"] == "epoch"]
    n_train, n_eval = split_sizes(data_dir)
    return Measurement(f"{processes} process(es) x {threads} thread(s)", n_train, n_eval,
                       [e["train_seconds"] for e in epochs], [e["eval_seconds"] for e in epochs], epochs[-1]["accuracy"],
                       time.perf_counter() - started)


def min_seconds(action, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def micro_image_loads(args, data_dir: Path) -> dict:
    """Loading one image (decode + the phase's transforms), each way, in isolation."""
    config = trainer_config(args, data_dir)
    files = sorted(data_dir.glob("*.jpg"))[:64]
    labels = [0] * len(files)
    results = {}
    with tempfile.TemporaryDirectory(prefix="pets-bench-cache-") as cache_dir:
        cache = ImageCache(cache_dir)
        for phase, transform, steps in (("train", train_transform(config), train_decode_steps(config)),
                                        ("eval", eval_transform(config), eval_decode_steps(config))):
            variants = {
                "full decode": PetsDataset(files, labels, transform, replace(steps, draft_size=None)),
                "draft decode": PetsDataset(files, labels, transform, steps),
                "draft decode, from the image cache": PetsDataset(files, labels, transform, steps, cache),
            }
            [variants["draft decode, from the image cache"][i] for i in range(len(files))]  # the first epoch fills it
            for label, dataset in variants.items():
                seconds = min_seconds(lambda dataset=dataset: [dataset[i] for i in range(len(dataset))], repeats=3)
                results[f"{phase} image load ({label}) ms/image"] = 1000 * seconds / len(files)
    return results


def micro_compute(args, malloc: str) -> dict:
    """The train step and the eval forward pass on random images, each way, in isolation."""
    torch.manual_seed(0)
    images = torch.rand(args.batch_size, 3, args.image_size, args.image_size)
    labels = torch.randint(0, args.classes, (args.batch_size,))
    eval_images = torch.rand(2 * args.batch_size, 3, args.image_size, args.image_size)  # the tutorial's eval batch
    results = {}
    for channels_last in (False, True):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        layout = "channels_last" if channels_last else "contiguous"
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
            name = f"train step ({layout}, {'no_grad encoder' if no_grad else 'plain'}, {malloc})"
            results[name + " ms/image"] = 1000 * min_seconds(step, repeats=args.micro_repeats) / args.batch_size
        wrapper.eval()
        eval_batch = eval_images.contiguous(memory_format=fmt)
        with torch.no_grad():
            wrapper(eval_batch)  # warm-up
            seconds = min_seconds(lambda: wrapper(eval_batch), args.micro_repeats)
        results[f"eval forward of {len(eval_batch)} ({layout}, {malloc}) ms/image"] = 1000 * seconds / len(eval_batch)
    return results


# --- one measurement per process -------------------------------------------------------------------

RESULT_PREFIX = "BENCHMARK-RESULT "


def run_in_child(args, data_dir: Path, seed: int | None = None, **task) -> dict:
    """One measurement in a fresh interpreter (with `seed` instead of `args.seed`), its result back as JSON.

    Nothing process-wide may carry over from one measurement to the next: the malloc settings the
    trainer makes, loader workers still alive, an allocator already warm.
    """
    payload = json.dumps({"args": {**vars(args), "seed": seed if seed is not None else args.seed},
                          "data_dir": str(data_dir), **task}, default=str)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", payload], capture_output=True, text=True, timeout=7200)
    if done.returncode != 0:
        raise SystemExit(f"measurement {task} failed:\n{done.stderr[-3000:]}")
    line = next(line for line in reversed(done.stdout.splitlines()) if line.startswith(RESULT_PREFIX))
    return {**json.loads(line[len(RESULT_PREFIX):]), "run_seconds": time.perf_counter() - started}


def child_main(payload: str) -> int:
    task = json.loads(payload)
    args, data_dir = argparse.Namespace(**task["args"]), Path(task["data_dir"])
    if task["kind"] == "baseline":
        result = vars(measure_baseline(args, data_dir))
    elif task["kind"] == "trainer":
        result = vars(measure_trainer(args, data_dir, task["name"], **task["switches"]))
    else:
        malloc = "glibc default malloc"
        if task["keep_freed_memory"]:
            malloc = "malloc keeps freed memory" if keep_freed_memory() else "glibc default malloc (could not change it)"
        result = micro_compute(args, malloc)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def best_of(runs: list[Measurement]) -> Measurement:
    """Each epoch's fastest train and eval time seen (other load on the machine only ever slows a run down),
    the fastest whole run, and the mean of the rounds' accuracies (each round's seed differs)."""
    first = runs[0]

    def fastest(times: list[list[float]]) -> list[float]:
        return [min(epoch) for epoch in zip(*times)]

    accuracies = [r.accuracy for r in runs]
    run_seconds = [r.run_seconds for r in runs if r.run_seconds is not None]
    return Measurement(first.name, first.train_images_per_epoch, first.eval_images_per_epoch,
                       fastest([r.train_seconds for r in runs]), fastest([r.eval_seconds for r in runs]),
                       sum(accuracies) / len(accuracies), min(run_seconds) if run_seconds else None, accuracies)


def interleaved(measurements: dict, repeats: int) -> dict[str, Measurement]:
    """Run each measurement `repeats` times, round-robin, so drifting machine load hits all alike.

    Each round starts one further along the list, so no configuration always runs first (a cold
    process) or always right after the same neighbour. `measure(round_number)`: every configuration
    of a round trains with that round's seed, so the accuracies compare like with like and their
    spread over the rounds says how far apart two accuracies may be by chance alone.
    """
    runs = {name: [] for name in measurements}
    names = list(measurements)
    for round_number in range(repeats):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            measure = measurements[name]
            print(f"-- round {round_number + 1}/{repeats}: {name}", flush=True)
            runs[name].append(measure(round_number))
    return {name: best_of(found) for name, found in runs.items()}


RATES = ("train_rate", "eval_rate", "last_train_rate", "last_eval_rate")


def table(rows: list[Measurement], reference: Measurement) -> str:
    """Images/second and the ratio to `reference`: over all epochs, then over the last epoch alone."""
    lines = [f"{'':<34} {'all epochs: img/s (x)':^31} {'last epoch: img/s (x)':^31} {'whole run':>15}",
             f"{'run':<34} {'train':>15} {'eval':>15} {'train':>15} {'eval':>15} {'s (x faster)':>15}"
             f" accuracy: mean (min-max)"]
    for row in rows:
        cells = " ".join(f"{getattr(row, rate):>7.1f} ({getattr(row, rate) / getattr(reference, rate):4.2f})"
                         for rate in RATES)
        whole = (f"{row.run_seconds:>7.1f} ({reference.run_seconds / row.run_seconds:4.2f})"
                 if row.run_seconds and reference.run_seconds else f"{'-':>15}")
        spread = f" ({min(row.accuracies):.3f}-{max(row.accuracies):.3f})" if len(row.accuracies) > 1 else ""
        lines.append(f"{row.name:<34} {cells} {whole} {row.accuracy:.3f}{spread}")
    return "\n".join(lines)


# Settings that --quick and --tiny change; a flag given on the command line wins over its preset.
PRESETS = {
    # The tutorial's model and input size, on photos the size of Oxford-IIIT Pets' (mostly 500 x 375).
    # Pets' 37 breeds; 888 images: epochs of about 60 s (tutorial's loop) and 20 s (trainer) on 2 cores.
    "tutorial": dict(model="resnet50d", image_size=224, source_size="500x375", classes=37, images_per_class=24,
                     epochs=2, batch_size=32, num_workers=4, repeats=3, scaling_repeats=2, micro_repeats=3),
    # As many images as Oxford-IIIT Pets has (7,349): epochs of about 55 s and 26-31 s on 2 cores.
    "quick": dict(model="resnet18d", image_size=128, source_size="384", images_per_class=200),
    "tiny": dict(model="resnet10t", image_size=32, source_size="64", classes=2, images_per_class=8, epochs=1,
                 batch_size=8, num_workers=1, repeats=1, scaling_repeats=1, micro_repeats=1),
}


def source_size(text: str) -> int | tuple[int, int]:
    """`384` (square) or `500x375` (width x height)."""
    width, _, height = text.lower().partition("x")
    return (int(width), int(height)) if height else int(width)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", dest="preset", action="store_const", const="quick", default="tutorial",
                        help="resnet18d at 128 px from 384 px JPEGs: about a third of the time")
    parser.add_argument("--tiny", dest="preset", action="store_const", const="tiny", help="smallest settings, for a smoke test")
    parser.add_argument("--model", help="timm model (resnet50d, the tutorial's)")
    parser.add_argument("--image-size", type=int, help="model input side (224, the tutorial's)")
    parser.add_argument("--source-size", help="generated JPEGs: a side (384) or WIDTHxHEIGHT (500x375)")
    parser.add_argument("--classes", type=int, help="(37, as in Oxford-IIIT Pets)")
    parser.add_argument("--images-per-class", type=int, help="(24; --quick: 200)")
    parser.add_argument("--epochs", type=int, help="(2)")
    parser.add_argument("--batch-size", type=int, help="(32)")
    parser.add_argument("--num-workers", type=int, help="loader workers for baseline and trainer (4, the tutorial's)")
    parser.add_argument("--mixed-precision", choices=MIXED_PRECISION_CHOICES, default="no",
                        help="both sides; fp16 and bf16 need a GPU (no)")
    parser.add_argument("--scaling-workers", type=int, default=1, help="loader workers per process in the scaling runs (1)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeats", type=int, help="interleaved repeats per configuration; best is kept (3)")
    parser.add_argument("--scaling-repeats", type=int, help="repeats of the 1 vs 2 processes runs (2)")
    parser.add_argument("--micro-repeats", type=int, help="repeats of each micro benchmark; best is kept (3)")
    parser.add_argument("--no-scaling", action="store_true", help="skip the 1 vs 2 processes runs")
    parser.add_argument("--no-micro", action="store_true", help="skip the per-choice micro benchmarks")
    parser.add_argument("--no-ablation", action="store_true", help="skip the ablation runs")
    parser.add_argument("--ablation", action="append", choices=list(ABLATIONS), metavar="NAME",
                        help="run only this ablation (repeatable); default: all of " + ", ".join(ABLATIONS))
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    for name, value in {**PRESETS["tutorial"], **PRESETS[args.preset]}.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.source_size = source_size(args.source_size)
    if not torch.cuda.is_available() and supported_mixed_precision(args.mixed_precision, cpu=True) != args.mixed_precision:
        parser.error(f"--mixed-precision {args.mixed_precision} needs a GPU or, for bf16, a CPU with AVX512-BF16 or AMX: "
                     "here the trainer would fall back to 'no', so there is nothing to compare")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child_main(argv[1])
    args = parse_args(argv)
    settings = {k: v for k, v in vars(args).items() if k not in ("json",)}
    print("settings:", json.dumps(settings, default=str), flush=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"device {'cuda' if torch.cuda.is_available() else 'cpu'}", flush=True)
    report: dict = {"settings": settings}
    with tempfile.TemporaryDirectory(prefix="pets-bench-") as workdir:
        data_dir = Path(workdir) / "images"
        generate_synthetic_pets(data_dir, args.classes, args.images_per_class, args.source_size, seed=args.seed)

        if not args.no_micro:
            micro = micro_image_loads(args, data_dir)
            for keep in (False, True):
                compute = run_in_child(args, data_dir, kind="compute", keep_freed_memory=keep)
                compute.pop("run_seconds")
                micro.update(compute)
            print("\n== each choice in isolation (min of repeats; lower is better) ==", flush=True)
            for name, value in micro.items():
                print(f"{name:<78} {value:8.2f}", flush=True)
            report["micro"] = micro

        runs = {"baseline": dict(kind="baseline"),
                "trainer": dict(kind="trainer", name="trainer (all speed choices)", switches={})}
        if not args.no_ablation:
            # Without --mixed-precision, "no mixed precision" would be the trainer again.
            ablations = args.ablation or [name for name in ABLATIONS if name != "no mixed precision" or args.mixed_precision != "no"]
            runs.update({name: dict(kind="trainer", name=name, switches=ABLATIONS[name]) for name in ablations})
        measurements = {name: lambda round_number, task=task: Measurement(
            **run_in_child(args, data_dir, seed=args.seed + round_number, **task)) for name, task in runs.items()}
        best = interleaved(measurements, args.repeats)
        baseline, trainer = best.pop("baseline"), best.pop("trainer")
        print("\n== baseline vs trainer (x = relative to the baseline) ==\n" + table([baseline, trainer], baseline), flush=True)
        report["baseline"], report["trainer"] = baseline.report(), trainer.report()
        if best:
            ablated = list(best.values())
            print("\n== ablation (each choice off in turn; x = relative to the trainer with all on) ==\n"
                  + table([trainer, *ablated], trainer), flush=True)
            report["ablation"] = [row.report() for row in ablated]
        if not torch.cuda.is_available():
            print("pin_memory: used only on a GPU, so not measured on this CPU", flush=True)

        if not args.no_scaling:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
            threads = max(1, cpus // 2)
            scaling = interleaved({
                "one": lambda round_number: measure_processes(args, data_dir, 1, threads, args.seed + round_number),
                "two": lambda round_number: measure_processes(args, data_dir, 2, threads, args.seed + round_number),
            }, args.scaling_repeats)
            one, two = scaling["one"], scaling["two"]
            efficiency = two.train_rate / (2 * one.train_rate)
            print("\n== scaling (pets-train, gloo on CPU; x = relative to 1 process) ==\n" + table([one, two], one), flush=True)
            print(f"parallel efficiency (train): {efficiency:.2f}", flush=True)
            report["scaling"] = {"one": one.report(), "two": two.report(), "train_efficiency": efficiency}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
