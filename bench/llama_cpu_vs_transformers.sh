#!/usr/bin/env bash
# spmd-train's Llama training step on the CPU against transformers' LlamaForCausalLM on PyTorch 2.x,
# eager and torch.compile (bench/llama_transformers.py: the same shape, batch, precision and AdamW
# settings), interleaved round by round, like bench/cpu_vs_pytorch.sh for GPT-2. Shapes:
#   baby   4 layers, 4 query / 2 key-value heads, 128 wide, SwiGLU 352, block 64, batch 12 (0.76M)
#   9.5m   6 layers, 6 / 2 heads, 384 wide, SwiGLU 1024, block 256, batch 16 (9.5M)
#   smollm SmolLM2-135M's shape (30 layers, 9 / 3 heads, 576 wide, SwiGLU 1536, vocabulary 49152,
#          tied head) with block 128, batch 4
# in fp32 and bf16 (bf16 products: ours model.matmul_dtype=bfloat16, theirs bf16 autocast; skipped
# where lscpu shows no avx512_bf16/amx_bf16). Random token ids (the same file for both). Each run
# measures its own matmul peak in its dtype (ours: the BLAS the kernels chose, and at::mm; theirs
# torch.mm) for MFU; both count 6 N + 12 L T C FLOPs per token. The losses after the run are
# printed as a check that both trained the same model (random ids: both near ln(vocabulary)). On a
# shared machine the fastest step of each runner (over its rounds) is printed beside the median: the
# step that had the cores, the less load-sensitive of the two.
#   bash bench/llama_cpu_vs_transformers.sh [ROUNDS=3] [OUTDIR=bench-out/llama-cpu] [SHAPES="baby 9.5m smollm"] [DTYPES="float32 bfloat16"]
# Ours from build/bench/bench_train, or SPMD_BUILD_DIR's; SPMD_BEFORE_BUILD_DIR adds another build's
# (e.g. a worktree of the commit before a change) as the runner "before", in the same rounds. Prints
# a table (the median of each runner's per-round medians) and writes it to OUTDIR/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
out=${2:-bench-out/llama-cpu}
shapes=${3:-baby 9.5m smollm}
dtypes=${4:-float32 bfloat16}
python=.venv-torch2/bin/python
mkdir -p "$out"
source bench/common.sh
need_program llama_cpu_vs_transformers bench/bench_train "${SPMD_BUILD_DIR:-build}" ${SPMD_BEFORE_BUILD_DIR:-}
lscpu | grep -E "Model name|^CPU\(s\)" >"$out/cpu.txt"
grep -qE "avx512_bf16|amx_bf16" /proc/cpuinfo || dtypes=${dtypes//bfloat16/}
random_tokens "$work/chars.bin" 65
random_tokens "$work/smollm.bin" 49152

# bench_train's overrides and steps (warmup, timed) per shape; llama_transformers.py's preset.
llama=(--set model.arch=llama --set model.dropout=0 --set runtime.threads_per_rank=2)
shape_args() {
  case $1 in
    baby) args=(--config configs/bench/baby.yaml --set model.n_kv_head=2 --set model.intermediate_size=352
                --set model.tie_embeddings=false); preset=baby; data=chars; steps=(3 30) ;;
    9.5m) args=(--config configs/bench/baby.yaml --set model.n_layer=6 --set model.n_head=6 --set model.n_kv_head=2
                --set model.n_embd=384 --set model.intermediate_size=1024 --set model.block_size=256
                --set data.batch_size=16 --set model.tie_embeddings=false); preset=9.5m; data=chars; steps=(2 5) ;;
    smollm) args=(--config configs/smollm2-135m.yaml --set model.block_size=128 --set data.batch_size=4
                  --set checkpoint.dir=\"\" --set train.lr=1.0e-3 --set train.beta2=0.99); preset=smollm2-135m; data=smollm; steps=(2 5) ;;
    *) echo "llama_cpu_vs_transformers: unknown shape $1" >&2; exit 1 ;;
  esac
}
ours() {  # NAME DTYPE [BUILD]
  "${3:-${SPMD_BUILD_DIR:-build}}/bench/bench_train" "${args[@]}" "${llama[@]}" --set model.matmul_dtype="$2" \
    --set data.train="$work/$data.bin" --set data.val="$work/$data.bin" --warmup "${steps[0]}" --steps "${steps[1]}" \
    --json "$out/$1-$r.json" >"$out/$1-$r.txt" 2>&1 || echo "ours $1 failed (see $out/$1-$r.txt)"
}
peer() {  # NAME DTYPE [--compile]
  local name=$1 dtype=$2; shift 2
  OMP_NUM_THREADS=2 "$python" bench/llama_transformers.py --preset "$preset" --data "$work/$data.bin" --dtype "$dtype" \
    --threads 2 --warmup "${steps[0]}" --steps "${steps[1]}" --json "$out/$name-$r.json" "$@" >"$out/$name-$r.txt" 2>&1 ||
    echo "peer $name failed (see $out/$name-$r.txt)"
}
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds"
  for shape in $shapes; do
    shape_args "$shape"
    for dtype in $dtypes; do
      ours "$shape-$dtype-ours" "$dtype"
      [ -z "${SPMD_BEFORE_BUILD_DIR:-}" ] || ours "$shape-$dtype-before" "$dtype" "$SPMD_BEFORE_BUILD_DIR"
      peer "$shape-$dtype-eager" "$dtype"
      peer "$shape-$dtype-compile" "$dtype" --compile
    done
  done
done
"$python" - "$out" "$rounds" "$shapes" "$dtypes" <<'PY' | tee "$out/table.md"
import json, os, statistics, sys
out, rounds, shapes, dtypes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
def load(name):
    return [json.load(open(p)) for r in range(1, rounds + 1) if os.path.exists(p := f"{out}/{name}-{r}.json")]
cpu = next(l for l in open(f"{out}/cpu.txt") if l.startswith("Model name")).split(":", 1)[1].strip()
blas = next((line.split("BLAS ", 1)[1].split(" (by")[0] for r in range(1, rounds + 1) for s in shapes for d in dtypes
             if os.path.exists(p := f"{out}/{s}-{d}-ours-{r}.txt") for line in open(p) if "BLAS " in line), "?")
torch = next((j["torch"] for s in shapes for d in dtypes for j in load(f"{s}-{d}-eager")), "?")
print(f"CPU: {cpu}, 2 threads each; ours: BLAS {blas} (fp32), oneDNN (bf16); peers: torch {torch}; "
      f"{rounds} interleaved rounds, median of the per-round medians")
print("| shape | dtype | runner | median step ms | ours vs it | fastest step ms | ours vs it | MFU (median) | peak GFLOP/s | last loss | rounds |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for shape in shapes:
    for dtype in dtypes:
        rows = {}
        for runner in ("ours", "before", "eager", "compile"):
            runs = load(f"{shape}-{dtype}-{runner}")
            if runs:
                rows[runner] = (statistics.median(j["median_step_ms"] for j in runs), min(min(j["step_ms"]) for j in runs),
                                statistics.median(j["mfu"] for j in runs),
                                statistics.median(j["matmul_peak_gflops"] for j in runs),
                                statistics.median(j["losses"][-1] for j in runs), len(runs))
        for runner, (ms, fastest, mfu, peak, loss, n) in rows.items():
            ratio = lambda i: f"{rows[runner][i] / rows['ours'][i]:.2f}x" if "ours" in rows and runner != "ours" else "-"
            print(f"| {shape} | {dtype} | {runner} | {ms:.1f} | {ratio(0)} | {fastest:.1f} | {ratio(1)} | {100 * mfu:.0f}% | "
                  f"{peak:.0f} | {loss:.3f} | {n} |")
PY
