#!/usr/bin/env bash
# GPT-2 124M on one GPU: spmd-train's step (bench_train, configs/gpt2-124m.yaml, bf16 operands)
# against PyTorch eager and torch.compile (bench/gpt2_pytorch.py) on the same model, batch and
# precision, interleaved ROUNDS times; every run measures its own bf16 8192^3 matmul peak.
# Data: random GPT-2 token ids (speed does not depend on the text). Writes JSON and a log per run
# and one table into OUTDIR. On an offline GPU host after scripts/device-build (see CONTRIBUTING.md):
#   bash bench/gpu_gpt2_124m.sh [BUILD_DIR=build-device] [BATCH=16] [ROUNDS=2] [OUTDIR=out/gpu-bench]
# A preflight says what the host lacks; each mode fails alone (its log says why) and the table is
# always written, a failed mode's row saying so. Exit 0 when every run succeeded, else 1.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
batch=${2:-16}
rounds=${3:-2}
outdir=${4:-out/gpu-bench}
python=${SPMD_DEVICE_PYTHON:-python3}
mkdir -p "$outdir" || exit 1

# ---- preflight: what each mode needs, said before any minute is spent
preflight() {
  [ -x "$build/bench/bench_train" ] || echo "preflight: no $build/bench/bench_train (run scripts/device-build): spmd-train's mode will fail"
  if ! "$python" -c 'import torch' 2>/dev/null; then
    echo "preflight: $python cannot import torch: the PyTorch modes will fail"
    return
  fi
  "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
    echo "preflight: torch sees no GPU: every mode will fail"
  command -v "${CC:-cc}" >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 ||
    echo "preflight: no C compiler (cc/gcc): torch.compile (Triton) will fail"
  "$python" -c 'import os, sysconfig, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' 2>/dev/null ||
    echo "preflight: no Python.h (python3-dev): torch.compile (Triton) will fail"
}
preflight | tee "$outdir/preflight.txt"

# Random token ids, with the standard library only (no numpy on the host needed).
tokens=$outdir/tokens.bin
"$python" -c "import array, random; random.seed(0); array.array('H', (random.randrange(50257) for _ in range(4_000_000))).tofile(open('$tokens', 'wb'))" ||
  echo "could not write $tokens" >&2

# run NAME ROUND COMMAND...: one mode's run; its output in NAME-ROUND.txt, its failure recorded, never fatal.
failed=0
run() {
  local name=$1 round=$2
  shift 2
  if "$@" > "$outdir/$name-$round.txt" 2>&1; then
    tail -n 3 "$outdir/$name-$round.txt"
  else
    echo "$name round $round failed (exit $?); last lines of $outdir/$name-$round.txt:"
    tail -n 5 "$outdir/$name-$round.txt" | sed 's/^/    /'
    rm -f "$outdir/$name-$round.json"
    failed=1
  fi
}
ours=(--config configs/gpt2-124m.yaml --set "data.train=$tokens" --set "data.val=$tokens"
      --set "data.batch_size=$batch" --set runtime.device=cuda --set runtime.backend=nccl
      --warmup 5 --steps 20 --peak-size 8192)
for r in $(seq 1 "$rounds"); do
  run ours "$r" "$build/bench/bench_train" "${ours[@]}" --json "$outdir/ours-$r.json"
  run eager "$r" "$python" bench/gpt2_pytorch.py --data "$tokens" --batch "$batch" --json "$outdir/eager-$r.json"
  run compile "$r" "$python" bench/gpt2_pytorch.py --data "$tokens" --batch "$batch" --compile --json "$outdir/compile-$r.json"
done

# The table, from whatever JSON the runs left (standard library only).
python3 - "$outdir" "$rounds" "$batch" <<'PY' | tee "$outdir/table.md"
import json, os, statistics, sys
out, rounds, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(name):
    paths = [f"{out}/{name}-{r}.json" for r in range(1, rounds + 1)]
    return [json.load(open(p)) for p in paths if os.path.exists(p)]
print(f"| GPT-2 124M, bf16, batch {batch}x1024, one GPU ({rounds} interleaved rounds, medians) "
      "| tokens/s | step ms | MFU | peak MiB |")
print("|---|---|---|---|---|")
def row(label, name, tps, step, mfu, mem):
    runs = load(name)
    if not runs:
        print(f"| {label} | failed: see {out}/{name}-*.txt | | | |")
        return
    med = lambda key: statistics.median(key(j) for j in runs)
    note = "" if len(runs) == rounds else f" ({rounds - len(runs)} of {rounds} runs failed)"
    print(f"| {label}{note} | {med(tps):,.0f} | {med(step):.1f} | {100 * med(mfu):.1f}% | {med(mem):,.0f} |")
row("spmd-train (bench_train)", "ours", lambda j: j["tokens_per_s"], lambda j: j["median_step_ms"],
    lambda j: j["mfu"], lambda j: j["peak_tensor_mib_max_over_ranks"])
for mode in ("eager", "compile"):
    row(f"PyTorch {mode}", mode, lambda j: j["tokens_per_s"], lambda j: j["median_step_ms"],
        lambda j: j["mfu"], lambda j: j["peak_memory_mib"])
PY
exit "$failed"
