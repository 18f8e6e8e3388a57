#!/usr/bin/env bash
# spmd-train's training step against eager PyTorch (bench/nanogpt_eager.py), step by step, from the
# same initial parameters (SPMD_TEST_HOOKS=dump_init=DIR spmd-train ...), tanh GELU on both sides, the baby config.
#   bash bench/compare_with_eager.sh [STEPS]   one fixed window of tinyshakespeare, STEPS steps (300)
#   bash bench/compare_with_eager.sh --full     the whole 2000-step baby run on spmd-train's own
#                                               batches (bench/dump_batches), 1 thread each: per-step
#                                               losses and the final whole-split val loss (~5 min)
# Prints the largest relative difference of the per-step losses. Needs python3-torch (Debian:
# apt-get install python3-torch) and datasets/shakespeare_char (see bench/NOTES.md).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3=/usr/bin/python3  # Debian's, where python3-torch lives
if [[ "${1:-}" == "--full" ]]; then
  ours=(--set data.window_stride=1 --set train.eval_batches=145 --set train.eval_every=2000 --set runtime.threads_per_rank=1)
  build/bench/dump_batches --config configs/bench/baby.yaml "${ours[@]}" --out "$work/batches.bin"
  SPMD_TEST_HOOKS="dump_init=$work/init" build/app/spmd-train --config configs/bench/baby.yaml "${ours[@]}" \
    --set train.log_every=1 --set output.dir="$work/ours" | grep "2000/2000"
  "$python3" bench/nanogpt_eager.py --preset baby --threads 1 --train 2000 --init "$work/init" --gelu tanh \
    --batches "$work/batches.bin" --loss-log "$work/eager.jsonl" | tail -1
else
  steps=${1:-300}
  "$python3" -c "import numpy as np; np.asarray(np.memmap('datasets/shakespeare_char/train.bin', dtype=np.uint16, mode='r')[:65]).tofile('$work/window.bin')"
  SPMD_TEST_HOOKS="dump_init=$work/init" build/app/spmd-train --config configs/bench/baby.yaml \
    --set data.train="$work/window.bin" --set train.eval_every=0 --set train.log_every=1 --set train.steps="$steps" \
    --set output.dir="$work/ours" >/dev/null
  "$python3" bench/nanogpt_eager.py --preset baby --data "$work/window.bin" --init "$work/init" --gelu tanh \
    --compare-steps "$steps" >"$work/eager.jsonl"
fi
"$python3" - "$work/ours/metrics.jsonl" "$work/eager.jsonl" <<'PY'
import json, sys
ours = [json.loads(line)["loss"] for line in open(sys.argv[1])]
eager = [json.loads(line)["loss"] for line in open(sys.argv[2])]
assert len(ours) == len(eager), (len(ours), len(eager))
rel = [abs(a - b) / abs(b) for a, b in zip(ours, eager)]
print(f"{len(ours)} steps: loss {ours[0]:.4f} -> {ours[-1]:.4f} (spmd-train) vs {eager[0]:.4f} -> {eager[-1]:.4f} (eager)")
print(f"largest relative difference: {max(rel[:50]):.1e} over the first 50 steps, {max(rel):.1e} over all")
PY
