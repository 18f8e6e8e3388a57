#!/usr/bin/env bash
# Context parallelism on a long-context model (configs/bench/long-context.yaml: 2 blocks, 64 wide,
# 4 heads, block 2048, batch 4 = 8192 tokens per step, byte vocabulary), at the same global batch:
#   one  [1] data, no context rule: one process, the fused CPU attention kernel
#   cp1  [1] context: one process with a context rule (one device: plain fused attention, no gather)
#   cp2  [2] context: each rank 1024 head-tail positions of every row, K/V all-gathered per block
#   cp4  [4] context: each rank 512 positions
#   ring2, ring4  cp2, cp4 with runtime.context_exchange: ring (keys and values sent around the
#        ring, only the visible blocks computed, no (T/cp, T) probabilities kept)
# For each: spmd-inspect's activations per rank, and from bench_train (threads per rank 1) the
# activations measured per rank (the bytes the autograd graphs held between forward and backward:
# graph_bytes_max_over_ranks), the peak of live tensors per rank (the caching allocator's, which
# adds parameters, gradients, AdamW state and the transient scores), the median step per round,
# tokens/s and rank 0's CPU share (CPU time / wall time: below 100% it waited for a core or in
# collectives). The variants run in turn, `rounds` times, so a shared machine's load hits all alike;
# the load average is printed before and after. Reads Debian's fortunes as bytes, prepared into a
# temporary folder. Prints a Markdown table (docs/context-parallel.md, "Measured").
# Usage: bash bench/context_long.sh [build dir] [rounds] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
steps=${3:-6}
config=configs/bench/long-context.yaml
source bench/common.sh
bash bench/fortunes_bytes.sh "$build" "$work/data"
echo "load average before: $(cat /proc/loadavg)"
others="[vocab, null], [heads, null], [mlp, null], [embed, null], [kv, null]"
variants="one cp1 cp2 ring2 cp4 ring4"
args() {  # the variant's mesh and rules
  case $1 in
    one) echo "--set mesh.shape=[1] --set mesh.axes=[data]" ;;
    cp*) echo "--set mesh.shape=[${1#cp}] --set mesh.axes=[context]" ;;
    ring*) echo "--set mesh.shape=[${1#ring}] --set mesh.axes=[context] --set runtime.context_exchange=ring" ;;
  esac
}
rules() { [ "$1" = one ] && echo "[[batch, data], [seq, null], $others]" || echo "[[batch, null], [seq, context], $others]"; }
for variant in $variants; do
  "$build/app/spmd-inspect" --config $config $(args "$variant") --set "sharding_rules=$(rules "$variant")" \
    --json > "$work/inspect-$variant.json"
done
# --peak-size 256: the matmul that measures the MFU peak would otherwise be the largest live
# tensors (3 x 16 MiB at 2048), above the step's own.
for ((r = 1; r <= rounds; r++)); do
  for variant in $variants; do
    "$build/bench/bench_train" --config $config --warmup 2 --steps "$steps" --peak-size 256 \
      $(args "$variant") --set "sharding_rules=$(rules "$variant")" --set runtime.threads_per_rank=1 \
      --set data.train="$work/data/train.bin" --set data.val="$work/data/val.bin" \
      --json "$work/$variant-$r.json" >/dev/null
  done
done
echo "load average after:  $(cat /proc/loadavg)"
python3 - "$work" "$rounds" "$variants" <<'PY'
import json, statistics, sys
work, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
mib = lambda b: b / 2**20
names = {"one": "`[1]` one process, no context rule (fused attention)", "cp1": "`[1]` context, cp 1",
         "cp2": "`[2]` context, cp 2", "cp4": "`[4]` context, cp 4",
         "ring2": "`[2]` context, cp 2, ring", "ring4": "`[4]` context, cp 4, ring"}
print("| mesh | activations per rank, spmd-inspect (MiB) | measured: held for backward (MiB) "
      "| measured: peak live tensors (MiB) | median step per round (ms) | median (ms) | tokens/s "
      "| CPU share per round | load per round |")
print("|---|---|---|---|---|---|---|---|---|")
for v in variants:
    inspect = json.load(open(f"{work}/inspect-{v}.json"))["totals"]["per_device"]["activations"]
    runs = [json.load(open(f"{work}/{v}-{r}.json")) for r in range(1, rounds + 1)]
    held = max(j["graph_bytes_max_over_ranks"] for j in runs)
    peak = max(j["peak_tensor_mib_max_over_ranks"] for j in runs)
    steps = [j["median_step_ms"] for j in runs]
    median = statistics.median(steps)
    tokens = runs[0]["tokens_per_step"] / (median / 1000)
    print(f"| {names[v]} | {mib(inspect):.1f} | {mib(held):.1f} | {peak:.1f} | "
          f"{', '.join('%.0f' % s for s in steps)} | {median:.0f} | {tokens:.0f} | "
          f"{', '.join('%.0f%%' % (100 * j['cpu_share']) for j in runs)} | "
          f"{', '.join('%.1f' % j['loadavg_1m'] for j in runs)} |")
PY
