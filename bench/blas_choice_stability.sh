#!/usr/bin/env bash
# Whether load can flip the BLAS choice (SPMD_BLAS=auto, lib/kernels/cpu/blas_decision.h): N cold
# starts of spmd-train on a quiet machine and N under load (two busy shell loops per online CPU),
# alternating, each with an empty SPMD_CACHE_DIR. For each start it records, from the blas-choice.json
# the start wrote, the library chosen, the basis (timed or rule), the median of the rounds' ratios
# t_mkl / t_openblas, the share of rounds agreeing with it and the other processes' share of the
# CPUs while it timed. Prints a table and writes it to OUT/table.md.
#   bash bench/blas_choice_stability.sh [N=10] [BUILD=build] [OUT=bench-out/blas]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
build=${2:-build}
out=${3:-bench-out/blas}
train=$build/app/spmd-train
[ -x "$train" ] || { echo "blas_choice_stability: no $train (bash scripts/build spmd-train)" >&2; exit 1; }
mkdir -p "$out"
source bench/common.sh
loops=()
stop_loops() {
  for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${loops[@]}"; do wait "$pid" 2>/dev/null || true; done
  loops=()
}
trap 'stop_loops; rm -rf "$work"' EXIT
cpus=$(nproc)

# The tests' tiny model on zero tokens: a start only has to reach the choice and take one step.
head -c 40000 /dev/zero >"$work/train.bin"
cp "$work/train.bin" "$work/val.bin"
tiny_config "$work/tiny.yaml" "$work" "[1, 1]" 1

cold_start() {  # $1: quiet or loaded, $2: index
  local dir=$work/$1-$2
  mkdir -p "$dir/cache"
  if ! SPMD_CACHE_DIR=$dir/cache SPMD_BLAS=auto timeout 300 "$train" --config "$work/tiny.yaml" \
      --set "output.dir=$dir/out" >"$dir/log" 2>&1; then
    echo "blas_choice_stability: $1 start $2 failed:" >&2
    tail -20 "$dir/log" >&2
    exit 1
  fi
  echo "$1 $2 $dir/cache/blas-choice.json" >>"$work/starts"
}

for i in $(seq 1 "$n"); do
  cold_start quiet "$i"
  for _ in $(seq 1 $((2 * cpus))); do
    sh -c 'while :; do :; done' &
    loops+=($!)
  done
  cold_start loaded "$i"
  stop_loops
  echo "blas_choice_stability: $i of $n pairs of starts done" >&2
done

python3 - "$work/starts" "$out/table.md" "$cpus" "$n" <<'EOF'
import json, statistics, sys
starts, table, cpus, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
rows = []
for line in open(starts):
    condition, index, path = line.split()
    entry = next(iter(json.load(open(path)).values()))
    rows.append((condition, int(index), entry))
lines = [f"CPU: {model}, {cpus} online CPUs; {n} cold starts quiet and {n} under {2 * int(cpus)} busy loops, "
         "alternating.", "",
         "| condition | starts | chosen | basis | median ratio t_mkl/t_openblas (min-max) | agreement (min-max) "
         "| others' CPU share (median) |",
         "|---|---|---|---|---|---|---|"]
for condition in ("quiet", "loaded"):
    es = [e for c, _, e in rows if c == condition]
    count = lambda key: ", ".join(f"{v} {sum(e[key] == v for e in es)}" for v in sorted({e[key] for e in es}))
    ratios = [e["median_ratio"] for e in es]
    agree = [e["agreement"] for e in es]
    lines.append(f"| {condition} | {len(es)} | {count('library')} | {count('basis')} | "
                 f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) | "
                 f"{statistics.median(agree):.2f} ({min(agree):.2f}-{max(agree):.2f}) | "
                 f"{statistics.median(e['others_cpu'] for e in es):.2f} |")
lines += ["", "| start | condition | chosen | basis | median ratio | agreement | others' CPU share "
          "| round ms (mkl / openblas, median) |", "|---|---|---|---|---|---|---|---|"]
for condition, index, e in sorted(rows, key=lambda r: (r[1], r[0] != "quiet")):
    mkl = statistics.median(r["mkl_s"] for r in e["rounds"]) * 1e3
    ob = statistics.median(r["openblas_s"] for r in e["rounds"]) * 1e3
    lines.append(f"| {index} | {condition} | {e['library']} | {e['basis']} | {e['median_ratio']:.3f} | "
                 f"{e['agreement']:.2f} | {e['others_cpu']:.2f} | {mkl:.1f} / {ob:.1f} |")
open(table, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "blas_choice_stability: wrote $out/table.md" >&2
