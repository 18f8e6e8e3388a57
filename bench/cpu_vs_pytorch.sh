#!/usr/bin/env bash
# spmd-train's CPU step against the peer a user would pick: nanoGPT's model in PyTorch 2.x, eager and
# torch.compile (bench/gpt2_pytorch.py: fp32, F.scaled_dot_product_attention, the same batch), on the
# same machine, interleaved round by round. Configs: nanoGPT's "baby" (4x128, block 64, batch 12)
# and the 10.7M shakespeare-char model (6x384, block 256, batch 64); ours also on 2 ranks as DP2
# and TP2 (1 thread each) against one process with 2 threads. Each run measures its own fp32 peak
# (ours: the BLAS the kernels chose, and at::mm; the peer: torch.mm) in the same run.
#   bash bench/cpu_vs_pytorch.sh [ROUNDS=3] [OUTDIR=bench-out/cpu] [STEPS_BABY=30] [STEPS_10M=5]
# Needs datasets/shakespeare_char (bench/NOTES.md, "Data") and the venv's torch (scripts/setup).
# Ours from build/bench/bench_train, or SPMD_BUILD_DIR's.
# Prints a table (median of each runner's per-round medians) and writes it to OUTDIR/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
out=${2:-bench-out/cpu}
steps_baby=${3:-30}
steps_big=${4:-5}
python=.venv-torch2/bin/python
mkdir -p "$out"
[ -f datasets/shakespeare_char/train.bin ] || { echo "cpu_vs_pytorch: prepare datasets/shakespeare_char first (bench/NOTES.md)" >&2; exit 1; }
lscpu | grep -E "Model name|^CPU\(s\)" | tee "$out/cpu.txt"

ours() {  # NAME CONFIG STEPS [bench_train args...]
  local name=$1 config=$2 steps=$3; shift 3
  "${SPMD_BUILD_DIR:-build}/bench/bench_train" --config "$config" --set model.dropout=0 --warmup 3 --steps "$steps" \
    --json "$out/$name-$r.json" "$@" >"$out/$name-$r.txt" 2>&1 || echo "ours $name failed (see $out/$name-$r.txt)"
}
peer() {  # NAME PRESET STEPS [--compile]
  local name=$1 preset=$2 steps=$3; shift 3
  OMP_NUM_THREADS=2 "$python" bench/gpt2_pytorch.py --device cpu --preset "$preset" --dtype float32 --threads 2 \
    --data datasets/shakespeare_char/train.bin --warmup 3 --steps "$steps" --peak-size 2048 \
    --json "$out/$name-$r.json" "$@" >"$out/$name-$r.txt" 2>&1 || echo "peer $name failed (see $out/$name-$r.txt)"
}
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds"
  ours baby-ours configs/bench/baby.yaml "$steps_baby" --set runtime.threads_per_rank=2
  peer baby-eager baby "$steps_baby"
  peer baby-compile baby "$steps_baby" --compile
  ours 10m-ours configs/bench/shakespeare-char.yaml "$steps_big" --set runtime.threads_per_rank=2
  peer 10m-eager shakespeare-char "$steps_big"
  peer 10m-compile shakespeare-char "$steps_big" --compile
  ours 10m-dp2 configs/bench/dp2.yaml "$steps_big" --set runtime.threads_per_rank=1
  ours 10m-tp2 configs/bench/tp2.yaml "$steps_big" --set runtime.threads_per_rank=1
done
"$python" - "$out" "$rounds" <<'PY' | tee "$out/table.md"
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    runs = []
    for r in range(1, rounds + 1):
        p = f"{out}/{name}-{r}.json"
        if os.path.exists(p):
            runs.append(json.load(open(p)))
    return runs
def ms(j): return j.get("median_step_ms") or j.get("median_ms") or j["step_ms"]["median"]
def mfu(j): return j.get("mfu")
rows = []
for cfg in ("baby", "10m"):
    base = None
    for runner in ("eager", "compile", "ours", "dp2", "tp2"):
        runs = load(f"{cfg}-{runner}")
        if not runs:
            continue
        step = statistics.median(ms(j) for j in runs)
        m = statistics.median(mfu(j) for j in runs if mfu(j) is not None) if any(mfu(j) is not None for j in runs) else None
        rows.append((cfg, runner, step, m, len(runs)))
print("| config | runner | median step ms | vs eager | vs compile | vs ours 1x2 | MFU | rounds |")
print("|---|---|---|---|---|---|---|---|")
for cfg, runner, step, m, n in rows:
    ref = {r: s for c, r, s, _, _ in rows if c == cfg}
    ratio = lambda k: f"{ref[k] / step:.2f}x" if k in ref else "-"
    print(f"| {cfg} | {runner} | {step:.1f} | {ratio('eager')} | {ratio('compile')} | {ratio('ours')} | "
          f"{'-' if m is None else f'{100 * m:.0f}%'} | {n} |")
PY
