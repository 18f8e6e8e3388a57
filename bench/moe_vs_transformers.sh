#!/usr/bin/env bash
# spmd-train's mixture-of-experts training step on the CPU against transformers'
# Qwen3MoeForCausalLM on PyTorch 2.x, eager and torch.compile (bench/moe_transformers.py: the same
# shape, batch and AdamW settings), interleaved round by round, like
# bench/llama_cpu_vs_transformers.sh for the dense Llama. Shape "10m": 6 layers, 384 wide, 6 query /
# 2 key-value heads with per-head query/key norms, every MLP 8 SwiGLU experts of width 512 with 2
# per token (renormalised) and the load-balancing loss (coefficient 0.001): 9.5M active parameters,
# 31M in all; block 128, batch 16, fp32, random character ids (the same file for both).
# Then the all-to-all's share of our step with the experts split over 2 and 4 processes
# ([expert, data] on a [2] and a [4] data mesh, the same global batch): bench_train's
# expert_exchange_median_ms, the wall time rank 0 spent in the rows' all-to-alls and the counts'
# all-gathers per step (lib/alltoall), against its median step.
#   bash bench/moe_vs_transformers.sh [ROUNDS=3] [OUTDIR=bench-out/moe-cpu] [EP="2 4"] [THREADS=2]
# THREADS: each single-process runner's threads (ours runtime.threads_per_rank, theirs
# torch.set_num_threads); on a machine others load, 1 keeps a runner from stalling at every
# parallel region's barrier while one of its threads waits for a core.
# Ours from build/bench/bench_train, or SPMD_BUILD_DIR's. Prints a table (the median of each
# runner's per-round medians) and writes it to OUTDIR/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
out=${2:-bench-out/moe-cpu}
eps=${3:-2 4}
threads=${4:-2}
python=.venv-torch2/bin/python
mkdir -p "$out"
source bench/common.sh
need_program moe_vs_transformers bench/bench_train "${SPMD_BUILD_DIR:-build}"
lscpu | grep -E "Model name|^CPU\(s\)" >"$out/cpu.txt"
random_tokens "$work/chars.bin" 65
steps=(2 5)

# moe_transformers.py's "10m" preset as bench_train overrides.
args=(--config configs/bench/baby.yaml --set model.arch=llama --set model.n_layer=6 --set model.n_head=6
      --set model.n_kv_head=2 --set model.n_embd=384 --set model.block_size=128 --set data.batch_size=16
      --set model.tie_embeddings=false --set model.qk_norm=true --set model.rms_norm_eps=1.0e-5
      --set model.moe.num_experts=8 --set model.moe.num_experts_per_tok=2 --set model.moe.moe_intermediate_size=512
      --set model.moe.norm_topk_prob=true --set model.moe.router_aux_loss_coef=0.001 --set model.dropout=0
      --set "data.train=\"$work/chars.bin\"" --set "data.val=\"$work/chars.bin\"")
rules="[vocab, null], [heads, null], [mlp, null], [embed, null], [seq, null], [kv, null]]"
ours() {  # NAME RANKS
  local mesh=(--set "sharding_rules=[[batch, data], [expert, null], $rules" --set runtime.threads_per_rank="$threads")
  [ "$2" -gt 1 ] && mesh=(--set "mesh.shape=[$2]" --set "sharding_rules=[[batch, data], [expert, data], $rules"
                          --set runtime.threads_per_rank=1)
  "${SPMD_BUILD_DIR:-build}/bench/bench_train" "${args[@]}" "${mesh[@]}" --warmup "${steps[0]}" --steps "${steps[1]}" \
    --json "$out/$1-$r.json" >"$out/$1-$r.txt" 2>&1 || echo "ours $1 failed (see $out/$1-$r.txt)"
}
peer() {  # NAME [--compile]
  local name=$1; shift
  OMP_NUM_THREADS=$threads "$python" bench/moe_transformers.py --preset 10m --data "$work/chars.bin" --threads "$threads" \
    --warmup "${steps[0]}" --steps "${steps[1]}" --json "$out/$name-$r.json" "$@" >"$out/$name-$r.txt" 2>&1 ||
    echo "peer $name failed (see $out/$name-$r.txt)"
}
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds"
  ours ours 1
  peer eager
  peer compile --compile
  for n in $eps; do ours "ours-ep$n" "$n"; done
done
"$python" - "$out" "$rounds" "$eps" "$threads" <<'PY' | tee "$out/table.md"
import json, os, statistics, sys
out, rounds, eps, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
def load(name):
    return [json.load(open(p)) for r in range(1, rounds + 1) if os.path.exists(p := f"{out}/{name}-{r}.json")]
med = statistics.median
cpu = next(l for l in open(f"{out}/cpu.txt") if l.startswith("Model name")).split(":", 1)[1].strip()
peers = load("eager")
torch = peers[0]["torch"] if peers else "?"
impl = peers[0]["experts_implementation"] if peers else "?"
print(f"CPU: {cpu}, {threads} thread(s) per single-process runner, 1 per rank on EP; peers: torch {torch}, transformers' experts {impl}; fp32; "
      f"{rounds} interleaved rounds, median of the per-round medians")
# CPU time per step (every thread's), beside the wall time: on a shared machine the wall time
# also counts the time other processes held the cores.
def cpu_ms(j):
    return med(j["step_cpu_ms"]) if j.get("step_cpu_ms") else float("nan")
print("| runner | median step ms | ours vs it | median CPU ms/step | ours vs it (CPU) | MFU (active) | last loss | rounds |")
print("|---|---|---|---|---|---|---|---|")
# MFU of the active parameters (k of E experts) for every runner: bench_train's own counts all.
fpt = peers[0]["flops_per_token"] if peers else 0
def mfu(j):
    return fpt * j["tokens_per_step"] / (j["median_step_ms"] / 1e3) / 1e9 / j["matmul_peak_gflops"]
rows = {}
for runner in ("ours", "eager", "compile"):
    runs = load(runner)
    if runs:
        cpus = [c for c in (cpu_ms(j) for j in runs) if c == c]
        rows[runner] = (med(j["median_step_ms"] for j in runs), med(cpus) if cpus else float("nan"),
                        med(mfu(j) for j in runs), med(j["losses"][-1] for j in runs), len(runs))
for runner, (ms, cpu, mfu, loss, n) in rows.items():
    ratio = f"{ms / rows['ours'][0]:.2f}x" if "ours" in rows and runner != "ours" else "-"
    cpu_ratio = f"{cpu / rows['ours'][1]:.2f}x" if "ours" in rows and runner != "ours" else "-"
    print(f"| {runner} | {ms:.1f} | {ratio} | {cpu:.1f} | {cpu_ratio} | {100 * mfu:.1f}% | {loss:.3f} | {n} |")
print()
print("| experts over | median step ms | all-to-all + count gathers ms/step | share of the step | rounds |")
print("|---|---|---|---|---|")
for n in eps:
    runs = load(f"ours-ep{n}")
    if runs:
        print(f"| {n} processes | {med(j['median_step_ms'] for j in runs):.1f} | "
              f"{med(j['expert_exchange_median_ms'] for j in runs):.1f} | "
              f"{100 * med(j['expert_exchange_median_share'] for j in runs):.1f}% | {len(runs)} |")
PY
