#!/usr/bin/env bash
# GPT-2 124M on one GPU, in one command: builds (scripts/device-build, when BUILD_DIR is
# build-device and a GPU is visible), checks correctness, then times spmd-train's step
# (bench_train, configs/gpt2-124m.yaml, bf16 operands) against PyTorch eager and torch.compile
# (bench/gpt2_pytorch.py, nanoGPT's model and step) on the same model, batch and precision,
# interleaved ROUNDS times, next to llm.c's published figures; every run measures its own bf16
# 8192^3 matmul peak, and MFU is also given against the GPU's spec sheet.
# The checks, each with its log: (1) one CUDA process's losses equal one CPU process's on a tiny
# model (fp32, runtime.tf32: false, 2e-4 relative as tests/gpu); (2) 2 ranks on the one GPU under
# backend auto fall back to Gloo, as summary.json names it; (3) the 124M runs' attention is a
# fused SDPA kernel (flash, memory-efficient or cuDNN), from the ops bench_train saw dispatched.
# Data: random GPT-2 token ids (speed does not depend on the text). Writes JSON and a log per run
# and one table into OUTDIR. On an offline GPU host (see CONTRIBUTING.md):
#   bash bench/gpu_gpt2_124m.sh [BUILD_DIR=build-device] [BATCH=16] [ROUNDS=2] [OUTDIR=out/gpu-bench]
# SPMD_BENCH_BUILD=0 uses BUILD_DIR as it is. A preflight says what the host lacks; each check and
# mode fails alone (its log says why) and the table is always written, a failed row saying so.
# Exit 0 when every check and run succeeded, else 1.
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
gpu_visible() { "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }

# ---- build: the device build, where it can run
failed=0
if [ "${SPMD_BENCH_BUILD:-1}" = 1 ] && [ "$build" = build-device ] && gpu_visible; then
  echo "build: bash scripts/device-build (log $outdir/build.txt)"
  if ! SPMD_DEVICE_PYTHON=$python bash scripts/device-build > "$outdir/build.txt" 2>&1; then
    echo "build failed; last lines of $outdir/build.txt:"; tail -n 5 "$outdir/build.txt" | sed 's/^/    /'
    failed=1
  fi
  tail -n 1 "$outdir/build.txt"
else
  echo "build: using $build as it is (the build step runs for build-device on a host with a GPU)"
fi

# Random token ids, with the standard library only (no numpy on the host needed).
tokens=$outdir/tokens.bin
"$python" -c "import array, random; random.seed(0); array.array('H', (random.randrange(50257) for _ in range(4_000_000))).tofile(open('$tokens', 'wb'))" ||
  echo "could not write $tokens" >&2

# ---- correctness, each check alone: "pass" or "FAIL: why" in OUTDIR/check-NAME.result
tiny=(--config configs/gpt2-124m.yaml --set "data.train=$tokens" --set "data.val=$tokens"
      --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=64
      --set model.matmul_dtype=float32 --set data.batch_size=8 --set train.steps=6 --set train.log_every=1
      --set train.eval_every=0 --set 'checkpoint.dir=""' --set runtime.timeout_s=120)
# check NAME COMMAND...: runs COMMAND (its output in check-NAME.txt); exit 0 = pass.
check() {
  local name=$1
  shift
  if "$@" > "$outdir/check-$name.txt" 2>&1; then echo pass > "$outdir/check-$name.result"
  else
    echo "FAIL: see $outdir/check-$name.txt" > "$outdir/check-$name.result"
    echo "check $name failed; last lines of $outdir/check-$name.txt:"; tail -n 5 "$outdir/check-$name.txt" | sed 's/^/    /'
    failed=1
  fi
}
# (1) The same 6 steps in fp32 on one CUDA process and one CPU process: every loss to 2e-4.
cuda_equals_cpu() {
  "$build/app/spmd-train" "${tiny[@]}" --set "output.dir=$outdir/tiny-cuda" --set runtime.device=cuda \
    --set runtime.backend=nccl --set runtime.tf32=false &&
  "$build/app/spmd-train" "${tiny[@]}" --set "output.dir=$outdir/tiny-cpu" --set runtime.device=cpu \
    --set runtime.backend=gloo &&
  python3 - "$outdir/tiny-cuda/metrics.jsonl" "$outdir/tiny-cpu/metrics.jsonl" <<'PY'
import json, sys
cuda, cpu = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
worst = max(abs(a / b - 1) for a, b in zip(cuda, cpu)) if cuda and len(cuda) == len(cpu) else float("inf")
print(f"CUDA {cuda}\nCPU  {cpu}\nlargest relative difference {worst:.2e} (bound 2e-4)")
sys.exit(0 if worst <= 2e-4 else 1)
PY
}
# (2) Two ranks on one GPU under backend auto: NCCL refuses a shared GPU, the run uses Gloo.
auto_falls_back() {
  CUDA_VISIBLE_DEVICES=${SPMD_BENCH_GPU:-0} "$build/app/spmd-train" "${tiny[@]}" --set "output.dir=$outdir/tiny-shared" \
    --set runtime.device=cuda --set runtime.backend=auto --set 'mesh.shape=[2]' &&
  python3 -c "import json, sys; b = json.load(open('$outdir/tiny-shared/summary.json'))['backend']; print('summary.json backend:', b); sys.exit(0 if b == 'gloo' else 1)"
}
check cuda-equals-cpu cuda_equals_cpu
check auto-falls-back-to-gloo auto_falls_back

# run NAME ROUND COMMAND...: one mode's run; its output in NAME-ROUND.txt, its failure recorded, never fatal.
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

# (3) The 124M runs' attention: a fused SDPA kernel on the GPU, from the ops bench_train saw dispatched.
fused_attention() {
  python3 - "$outdir" "$rounds" <<'PY'
import json, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = [json.load(open(p)) for p in (f"{out}/ours-{r}.json" for r in range(1, rounds + 1)) if os.path.exists(p)]
if not runs:
    sys.exit("no bench_train JSON: the 124M runs failed")
for j in runs:
    ops = j.get("attention_ops") or []
    print("attention ops:", ", ".join(ops) or "none")
    fused = [o for o in ops if any(k in o for k in ("flash_attention", "efficient_attention", "cudnn_attention"))
             and "for_cpu" not in o]
    if not fused:
        sys.exit("no flash / memory-efficient / cuDNN SDPA kernel ran")
PY
}
check fused-attention fused_attention

# The table, from whatever JSON the runs left (standard library only).
python3 - "$outdir" "$rounds" "$batch" <<'PY' | tee "$outdir/table.md"
import json, os, statistics, sys
out, rounds, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(name):
    paths = [f"{out}/{name}-{r}.json" for r in range(1, rounds + 1)]
    return [json.load(open(p)) for p in paths if os.path.exists(p)]
checks = [("CUDA loss equals CPU loss (tiny model, fp32)", "cuda-equals-cpu"),
          ("2 ranks on one GPU, backend auto: Gloo in summary.json", "auto-falls-back-to-gloo"),
          ("flash / efficient SDPA kernel dispatched (124M)", "fused-attention")]
for label, name in checks:
    path = f"{out}/check-{name}.result"
    print(f"- {label}: {open(path).read().strip() if os.path.exists(path) else 'not run'}")
print()
ours = load("ours")
# One FLOP count for every row (bench_train's: 6 N + 12 L T C per token) and the GPU's spec peak,
# both from bench_train's JSON.
flops = ours[0]["flops_per_token"] if ours else None
spec = ours[0].get("spec_peak_tflops_per_device") if ours else None
gpu = ours[0].get("device_name", "") if ours else ""
print(f"| GPT-2 124M, bf16, batch {batch}x1024, one GPU{' (' + gpu + ')' if gpu else ''}, {rounds} interleaved "
      f"rounds, medians | tokens/s | step ms | MFU (measured peak) | MFU (spec {spec or '?'} TFLOP/s) | peak MiB |")
print("|---|---|---|---|---|---|")
def spec_mfu(tps):
    return f"{100 * tps * flops / (spec * 1e12):.1f}%" if flops and spec else ""
def row(label, name, tps, step, mfu, mem):
    runs = load(name)
    if not runs:
        print(f"| {label} | failed: see {out}/{name}-*.txt | | | | |")
        return
    med = lambda key: statistics.median(key(j) for j in runs)
    note = "" if len(runs) == rounds else f" ({rounds - len(runs)} of {rounds} runs failed)"
    print(f"| {label}{note} | {med(tps):,.0f} | {med(step):.1f} | {100 * med(mfu):.1f}% | {spec_mfu(med(tps))} "
          f"| {med(mem):,.0f} |")
row("spmd-train (bench_train)", "ours", lambda j: j["tokens_per_s"], lambda j: j["median_step_ms"],
    lambda j: j["mfu"], lambda j: j["peak_tensor_mib_max_over_ranks"])
for mode in ("eager", "compile"):
    row(f"PyTorch {mode}", mode, lambda j: j["tokens_per_s"], lambda j: j["median_step_ms"],
        lambda j: j["mfu"], lambda j: j["peak_memory_mib"])
# llm.c's published GPT-2 124M runs (10B tokens, batch 0.5M tokens), per GPU from the whole run's
# wall clock (evaluations included): 8x A100 80GB SXM in ~90 min (llm.c discussion #481),
# 8x H100 in ~45 min (as the modded-nanogpt README cites it). MFU against each run's own GPU.
for label, minutes, peak in (("llm.c, 8x A100 SXM, published (per GPU)", 90, 312), ("llm.c, 8x H100, published (per GPU)", 45, 989)):
    tps = 10e9 / (minutes * 60) / 8
    mfu = f"{100 * tps * flops / (peak * 1e12):.0f}% of {peak}" if flops else ""
    print(f"| {label} | {tps:,.0f} | | | {mfu} | |")
PY
exit "$failed"
