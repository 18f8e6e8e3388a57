#!/usr/bin/env bash
# Context parallelism against data parallelism on 2 ranks, the default model (configs/default.yaml,
# block 64, batch 32): [2] data (each rank 16 rows x 64 positions) against [2] context (each rank 32
# rows x 32 head-tail positions: the same tokens per rank, plus one all-gather of K/V per block).
# Runs the two variants in turn, `rounds` times (a shared machine's noise hits both alike), with
# bench_train, and prints each run's median step time and spmd-inspect's activations per rank.
# Reads Debian's fortunes as bytes, prepared into a temporary folder.
# Usage: bash bench/context_vs_data.sh [build dir] [rounds] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
steps=${3:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/app/spmd-prepare" --input /usr/share/games/fortunes --out "$work/data" --vocab byte --val-fraction 0.1 \
  --exclude '*.dat' '*.u8' 'off' '.*' --quiet
lscpu | grep -E '^Model name' || true
others="[vocab, null], [heads, null], [mlp, null], [embed, null], [kv, null]"
args() {  # the variant's mesh and rules, then the shared settings
  case $1 in
    data) echo "--set mesh.shape=[2] --set mesh.axes=[data]" ;;
    context) echo "--set mesh.shape=[2] --set mesh.axes=[context]" ;;
  esac
}
rules() { [ "$1" = data ] && echo "[[batch, data], [seq, null], $others]" || echo "[[batch, null], [seq, context], $others]"; }
for variant in data context; do
  "$build/app/spmd-inspect" --config configs/default.yaml $(args $variant) --set "sharding_rules=$(rules $variant)" \
    --json > "$work/inspect-$variant.json"
done
# One process holds the whole batch: the context split halves what it keeps, less the gathered K/V.
"$build/app/spmd-inspect" --config configs/default.yaml --set mesh.shape=[1] --set mesh.axes=[data] \
  --set "sharding_rules=$(rules data)" --json > "$work/inspect-one.json"
for ((r = 1; r <= rounds; r++)); do
  for variant in data context; do
    "$build/bench/bench_train" --config configs/default.yaml --nproc 2 --warmup 2 --steps "$steps" \
      $(args $variant) --set "sharding_rules=$(rules $variant)" --set runtime.threads_per_rank=1 \
      --set model.vocab_size=256 --set data.train="$work/data/train.bin" --set data.val="$work/data/val.bin" \
      --json "$work/$variant-$r.json" >/dev/null
  done
done
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
one = json.load(open(f"{work}/inspect-one.json"))["totals"]["per_device"]["activations"] / 2**20
print(f"one      activations per rank {one:6.2f} MiB  (one process, the whole batch)")
for variant in ("data", "context"):
    inspect = json.load(open(f"{work}/inspect-{variant}.json"))["totals"]["per_device"]
    runs = [json.load(open(f"{work}/{variant}-{r}.json")) for r in range(1, rounds + 1)]
    steps = [j["median_step_ms"] for j in runs]
    per_run = ", ".join("%.1f" % s for s in steps)
    loads = ", ".join("%.1f" % j["loadavg_1m"] for j in runs)
    mib = inspect["activations"] / 2**20
    print(f"{variant:8s} activations per rank {mib:6.2f} MiB  step ms per run {per_run}  "
          f"median {statistics.median(steps):.1f}  load {loads}")
PY
