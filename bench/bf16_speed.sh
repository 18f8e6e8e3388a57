#!/usr/bin/env bash
# bf16 matmuls (model.matmul_dtype: bfloat16) against fp32 on the 10.7M config, before and after a
# change: ROUNDS interleaved rounds, each running bench_train of BEFORE and AFTER in fp32 and bf16
# (dropout 0), plus the baby config in fp32 for both builds. Each round's bf16/fp32 ratio is taken
# within one build and one round (a shared machine's load moves both alike); the table has every
# round's medians, ratios (by wall and by CPU time) and CPU shares, then the medians over rounds,
# and fp32 after/before per round. Names the CPU and whether it has bf16 instructions. Needs the
# shakespeare_char data (bench/NOTES.md, "Data").
#   bash bench/bf16_speed.sh BEFORE_BUILD AFTER_BUILD [ROUNDS=3] [OUT=bench-out/bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?BEFORE build dir}
after=${2:?AFTER build dir}
rounds=${3:-3}
out=${4:-bench-out/bf16}
source bench/common.sh
need_program bf16_speed bench/bench_train "$before" "$after"
[ -f datasets/shakespeare_char/train.bin ] || { echo "bf16_speed: no datasets/shakespeare_char (bench/NOTES.md, Data)" >&2; exit 1; }
mkdir -p "$out"

run() {  # $1 build, $2 label, $3 config, $4 dtype, $5 round, then bench_train flags
  local build=$1 label=$2 config=$3 dtype=$4 round=$5
  shift 5
  local json=$out/$label-$(basename "$config" .yaml)-$dtype-$round.json
  timeout 900 "$build/bench/bench_train" --config "$config" --set model.dropout=0 \
    --set "model.matmul_dtype=$dtype" --json "$json" "$@" >"$json.log" 2>&1 ||
    { echo "bf16_speed: $label $config $dtype failed:" >&2; tail -20 "$json.log" >&2; exit 1; }
}

for r in $(seq 1 "$rounds"); do
  for label in before after; do
    build=$before
    [ "$label" = after ] && build=$after
    run "$build" "$label" configs/bench/shakespeare-char.yaml float32 "$r" --warmup 1 --steps 4
    run "$build" "$label" configs/bench/shakespeare-char.yaml bfloat16 "$r" --warmup 1 --steps 4
    run "$build" "$label" configs/bench/baby.yaml float32 "$r" --warmup 5 --steps 40
  done
  echo "bf16_speed: round $r of $rounds done" >&2
done

python3 - "$out" "$rounds" <<'PY' | tee "$out/table.md"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(label, config, dtype, r):
    return json.load(open(f"{out}/{label}-{config}-{dtype}-{r}.json"))
flags = open("/proc/cpuinfo").read()
def field(name):
    return next((l.split(":", 1)[1].strip() for l in flags.splitlines() if l.split(":")[0].strip() == name), "?")
bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f" {f}" in flags]
# "AMD EPYC" alone names neither Zen 4 (family 25) nor Zen 5 (26); a forced OpenBLAS core changes fp32.
import os
core = os.environ.get("OPENBLAS_CORETYPE", "")
print(f"CPU: {field('model name')} (family {field('cpu family')} model {field('model')}); "
      f"bf16 instructions: {', '.join(bf16) or 'none'}; OPENBLAS_CORETYPE {core or 'unset'}\n")
print("| round | build | 10.7M fp32 ms | 10.7M bf16 ms | bf16 speed-up | by CPU time | baby fp32 ms | CPU share fp32/bf16 | final loss fp32/bf16 |")
print("|---|---|---|---|---|---|---|---|---|")
# CPU time per step (the process's, all threads): what a shared machine's load disturbs least.
def cpu_ms(j):
    return j["cpu_share"] * j["timed_loop_wall_ms"] / j["steps"] * j["threads_per_rank"]
ratios = {"before": [], "after": []}
cpu_ratios = {"before": [], "after": []}
baby = {"before": [], "after": []}
for r in range(1, rounds + 1):
    for label in ("before", "after"):
        f = load(label, "shakespeare-char", "float32", r)
        b = load(label, "shakespeare-char", "bfloat16", r)
        y = load(label, "baby", "float32", r)
        ratio = f["median_step_ms"] / b["median_step_ms"]
        cpu_ratio = cpu_ms(f) / cpu_ms(b)
        cpu_ratios[label].append(cpu_ratio)
        ratios[label].append(ratio)
        baby[label].append(y["median_step_ms"])
        print(f"| {r} | {label} | {f['median_step_ms']:.0f} | {b['median_step_ms']:.0f} | {ratio:.2f}x | {cpu_ratio:.2f}x | "
              f"{y['median_step_ms']:.2f} | {f['cpu_share']:.2f}/{b['cpu_share']:.2f} | "
              f"{f['losses'][-1]:.4f}/{b['losses'][-1]:.4f} |")
print()
for label in ("before", "after"):
    print(f"{label}: median bf16 speed-up {statistics.median(ratios[label]):.2f}x (by CPU time "
          f"{statistics.median(cpu_ratios[label]):.2f}x) over {rounds} rounds; "
          f"baby fp32 median {statistics.median(baby[label]):.2f} ms")
# fp32 after against before, each round's pair (run back to back) as one ratio: > 1 is faster.
for config, name in (("shakespeare-char", "10.7M"), ("baby", "baby")):
    pairs = [load("before", config, "float32", r)["median_step_ms"] / load("after", config, "float32", r)["median_step_ms"]
             for r in range(1, rounds + 1)]
    cpu = [cpu_ms(load("before", config, "float32", r)) / cpu_ms(load("after", config, "float32", r))
           for r in range(1, rounds + 1)]
    print(f"fp32 {name}: before/after step time {statistics.median(pairs):.3f} (median of {rounds} rounds: "
          f"{', '.join(f'{p:.3f}' for p in pairs)}; > 1: after is faster); by CPU time {statistics.median(cpu):.3f}")
PY
