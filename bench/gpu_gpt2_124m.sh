#!/usr/bin/env bash
# GPT-2 124M on one GPU: spmd-train's step (bench_train, configs/gpt2-124m.yaml, bf16 operands)
# against PyTorch eager and torch.compile (bench/gpt2_pytorch.py) on the same model, batch and
# precision, interleaved ROUNDS times; every run measures its own bf16 8192^3 matmul peak.
# Data: random GPT-2 token ids (speed does not depend on the text). Writes JSON per run and one
# table into OUTDIR. On a GPU host after scripts/device-build (see CONTRIBUTING.md):
#   bash bench/gpu_gpt2_124m.sh [BUILD_DIR=build-device] [BATCH=16] [ROUNDS=2] [OUTDIR=out/gpu-bench]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
batch=${2:-16}
rounds=${3:-2}
outdir=${4:-out/gpu-bench}
python=${SPMD_DEVICE_PYTHON:-python3}
mkdir -p "$outdir"
tokens=$outdir/tokens.bin
"$python" -c "import numpy as np; np.random.default_rng(0).integers(0, 50257, 4_000_000, dtype=np.uint16).tofile('$tokens')"
ours=(--config configs/gpt2-124m.yaml --set "data.train=$tokens" --set "data.val=$tokens"
      --set "data.batch_size=$batch" --set runtime.device=cuda --set runtime.backend=nccl
      --warmup 5 --steps 20 --peak-size 8192)
for r in $(seq 1 "$rounds"); do
  "$build/bench/bench_train" "${ours[@]}" --json "$outdir/ours-$r.json" | tee "$outdir/ours-$r.txt"
  "$python" bench/gpt2_pytorch.py --data "$tokens" --batch "$batch" --json "$outdir/eager-$r.json"
  "$python" bench/gpt2_pytorch.py --data "$tokens" --batch "$batch" --compile --json "$outdir/compile-$r.json"
done
"$python" - "$outdir" "$rounds" <<'PY' | tee "$outdir/table.md"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    return [json.load(open(f"{out}/{name}-{r}.json")) for r in range(1, rounds + 1)]
def row(label, runs, tps, step, mfu, mem):
    med = lambda key: statistics.median(key(j) for j in runs)
    print(f"| {label} | {med(tps):,.0f} | {med(step):.1f} | {100 * med(mfu):.1f}% | {med(mem):,.0f} |")
print(f"| GPT-2 124M, bf16, batch {load('eager')[0]['batch']}x1024, one GPU ({rounds} interleaved rounds, medians) "
      "| tokens/s | step ms | MFU | peak MiB |")
print("|---|---|---|---|---|")
ours = load("ours")
row("spmd-train (bench_train)", ours, lambda j: j["tokens_per_s"], lambda j: j["median_step_ms"],
    lambda j: j["mfu"], lambda j: j["peak_tensor_mib_max_over_ranks"])
for mode in ("eager", "compile"):
    row(f"PyTorch {mode}", load(mode), lambda j: j["tokens_per_s"], lambda j: j["median_step_ms"],
        lambda j: j["mfu"], lambda j: j["peak_memory_mib"])
PY
