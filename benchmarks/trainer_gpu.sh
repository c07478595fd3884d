#!/usr/bin/env bash
# The trainer benchmark on a GPU machine: the default preset (the tutorial's resnet50d at 224 px)
# for 5 epochs, without and with bf16, then the same on a data set 8x larger, where an epoch is
# long enough that the loader's start-up does not decide the figure. Figures to docs/performance.md.
#
#   benchmarks/trainer_gpu.sh OUTDIR          # needs torch, timm, accelerate, pillow, pyyaml
set -euo pipefail
out=${1:?usage: benchmarks/trainer_gpu.sh OUTDIR}
cd "$(dirname "$0")/.."
export PYTHONPATH=operator:trainer_image PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  echo "cpus: $(nproc)"
  "$python" -c 'import sys, torch, timm, accelerate; print("python", sys.version.split()[0], "torch", torch.__version__, "timm", timm.__version__, "accelerate", accelerate.__version__, "cuda", torch.cuda.is_available())'
} | tee "$out/machine.txt"
# A smoke run first, so a broken environment costs seconds, not the whole lease.
"$python" benchmarks/trainer_throughput.py --tiny --no-scaling --no-micro --no-ablation > "$out/smoke.log" 2>&1 \
  || { tail -40 "$out/smoke.log"; exit 1; }
for images in 48 384; do
  for precision in no bf16; do
    name="trainer-gpu-${images}x4-${precision}"
    echo "== $name"
    "$python" benchmarks/trainer_throughput.py --epochs 5 --images-per-class "$images" --no-scaling --no-micro \
      --no-ablation --repeats 2 --mixed-precision "$precision" --json "$out/$name.json" > "$out/$name.log" 2>&1 \
      || { tail -40 "$out/$name.log"; exit 1; }
    sed -n '/== baseline vs trainer/,$p' "$out/$name.log"
  done
done
