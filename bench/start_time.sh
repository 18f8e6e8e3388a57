#!/usr/bin/env bash
# What a process start costs, before and after a change: ROUNDS interleaved rounds, each timing, for
# BEFORE and AFTER, `spmd-train --help` (loading the libraries, nothing else) 5 times and a tiny
# run of 8 ranks (2 layers, width 32, 4 steps, on [4,2]) once, under GNU time: wall seconds, CPU
# seconds (user + system, the run's whole process tree) and page faults. The table has every
# round's figures and the medians.
#   bash bench/start_time.sh BEFORE_BUILD AFTER_BUILD [ROUNDS=3] [OUT=bench-out/start]
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?BEFORE build dir}
after=${2:?AFTER build dir}
rounds=${3:-3}
out=${4:-bench-out/start}
[ -x /usr/bin/time ] || { echo "start_time: needs GNU time (/usr/bin/time; apt-get install time)" >&2; exit 1; }
source bench/common.sh
need_program start_time app/spmd-train "$before" "$after"
mkdir -p "$out"
random_tokens "$work/train.bin" 72 20000
random_tokens "$work/val.bin" 72 4000
tiny_config "$work/tiny.yaml" "$work" "[4, 2]" 4

measure() {  # $1 label, $2 kind, $3 round, then the command; appends "label kind round wall cpu faults"
  local label=$1 kind=$2 round=$3
  shift 3
  /usr/bin/time -o "$work/time" -f "%e %U %S %R" timeout 300 "$@" >"$work/log" 2>&1 ||
    { echo "start_time: $label $kind failed:" >&2; tail -20 "$work/log" >&2; exit 1; }
  awk -v l="$label" -v k="$kind" -v r="$round" '{print l, k, r, $1, $2 + $3, $4}' "$work/time" >>"$out/runs.txt"
}

: >"$out/runs.txt"
for r in $(seq 1 "$rounds"); do
  for label in before after; do
    build=$before
    [ "$label" = after ] && build=$after
    for _ in 1 2 3 4 5; do measure "$label" help "$r" "$build/app/spmd-train" --help; done
    measure "$label" 8-ranks "$r" "$build/app/spmd-train" --config "$work/tiny.yaml" --set "output.dir=$work/out-$label-$r"
  done
done

python3 - "$out/runs.txt" "$before" "$after" <<'PY' | tee "$out/table.md"
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, kind, _, wall, cpu, faults = line.split()
    runs[(label, kind)].append((float(wall), float(cpu), int(faults)))
info = open("/proc/cpuinfo").read().splitlines()
def field(name):
    return next((l.split(":", 1)[1].strip() for l in info if l.split(":")[0].strip() == name), "?")
cpus = sum(1 for l in info if l.startswith("processor"))
print(f"CPU: {field('model name')} (family {field('cpu family')} model {field('model')}), {cpus} online; "
      f"before = {sys.argv[2]}, after = {sys.argv[3]}\n")
print("| what | build | runs | median wall s | median CPU s | median page faults |")
print("|---|---|---|---|---|---|")
for kind in ("help", "8-ranks"):
    for label in ("before", "after"):
        rows = runs[(label, kind)]
        med = lambda i: statistics.median(r[i] for r in rows)
        print(f"| {'spmd-train --help' if kind == 'help' else 'tiny run, 8 ranks'} | {label} | {len(rows)} | "
              f"{med(0):.2f} | {med(1):.2f} | {med(2):.0f} |")
PY
