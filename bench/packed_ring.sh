#!/usr/bin/env bash
# Packed documents (data.document_mask, docs/packing.md) on long windows: configs/bench/long-context.yaml
# (block 2048, 2 blocks, 64 wide, batch 4) on Debian's fortunes read as bytes, where '%' (byte 37)
# ends each fortune (a few hundred bytes: a 2048-byte window packs about ten). Four variants at the
# same global batch, in turn, `rounds` times (a shared machine's load hits all alike):
#   one          [1] one process, the fused CPU attention kernel, no mask
#   one-packed   the same with document_mask: the kernel skips the keys before a row block's first start
#   ring4        [4] context, runtime.context_exchange: ring, no mask
#   ring4-packed the same with document_mask: blocks that share no document are skipped, and the
#                CPU block kernel computes each row's keys from its document's start only
# From bench_train (threads per rank 1): the median step per round, tokens/s, rank 0's CPU share, and
# rank 0's CPU time per step: the work a rank did, which oversubscribed cores (four ranks on two)
# stretch far less than the wall-clock step.
# Prints a Markdown table (docs/packing.md, "Measured").
# Usage: bash bench/packed_ring.sh [build dir] [rounds] [steps] [variants, default all four]
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
variants=${4:-one one-packed ring4 ring4-packed}
args() {  # the variant's mesh, rules and mask
  case $1 in
    one*) echo "--set mesh.shape=[1] --set mesh.axes=[data]" ;;
    ring4*) echo "--set mesh.shape=[4] --set mesh.axes=[context] --set runtime.context_exchange=ring" ;;
  esac
  case $1 in *-packed) echo "--set data.document_mask=true --set data.eot_token=37" ;; esac
}
rules() { case $1 in one*) echo "[[batch, data], [seq, null], $others]" ;; *) echo "[[batch, null], [seq, context], $others]" ;; esac; }
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
names = {"one": "`[1]` one process, fused kernel", "one-packed": "`[1]` one process, fused kernel, document_mask",
         "ring4": "`[4]` context, ring", "ring4-packed": "`[4]` context, ring, document_mask"}
print("| variant | median step per round (ms) | median (ms) | tokens/s | rank 0 CPU ms per step | CPU share per round | load per round |")
print("|---|---|---|---|---|---|---|")
for v in variants:
    runs = [json.load(open(f"{work}/{v}-{r}.json")) for r in range(1, rounds + 1)]
    steps = [j["median_step_ms"] for j in runs]
    median = statistics.median(steps)
    tokens = runs[0]["tokens_per_step"] / (median / 1000)
    cpu = statistics.median(c for j in runs for c in j["step_cpu_ms"])
    print(f"| {names[v]} | {', '.join('%.0f' % s for s in steps)} | {median:.0f} | {tokens:.0f} | {cpu:.0f} | "
          f"{', '.join('%.0f%%' % (100 * j['cpu_share']) for j in runs)} | "
          f"{', '.join('%.1f' % j['loadavg_1m'] for j in runs)} |")
PY
