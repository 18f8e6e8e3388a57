#!/usr/bin/env bash
# Step time of the baby config and the 10.7M model (configs/bench/shakespeare-char.yaml, dropout 0)
# on one process, for each build given, interleaved: every round runs each build on each config, so
# a shared machine's load hits them alike; the medians over the rounds' median steps are compared.
# Token ids are random below 65 (the configs' vocabulary): the step does not depend on the text.
# CPU time per step (the work done) is shown beside the wall time: on a loaded machine it is the
# steadier of the two. Prints a Markdown table (bench/NOTES.md).
# Usage: bash bench/head_loss_speed.sh ROUNDS BUILD_DIR...   hold /tmp/spmd-build.lock
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=$1
shift
builds=("$@")
source bench/common.sh
random_tokens "$work/tokens.bin" 65
echo "load average before: $(cat /proc/loadavg)"
data=(--set data.train="$work/tokens.bin" --set data.val="$work/tokens.bin")
for ((r = 1; r <= rounds; r++)); do
  for i in "${!builds[@]}"; do
    "${builds[$i]}/bench/bench_train" --config configs/bench/baby.yaml "${data[@]}" --warmup 5 --steps 40 \
      --json "$work/baby-$i-$r.json" > /dev/null
    "${builds[$i]}/bench/bench_train" --config configs/bench/shakespeare-char.yaml --set model.dropout=0 "${data[@]}" \
      --warmup 2 --steps 6 --json "$work/10m-$i-$r.json" > /dev/null
  done
done
echo "load average after:  $(cat /proc/loadavg)"
python3 - "$work" "$rounds" "${builds[@]}" <<'PY'
import json, statistics, sys
work, rounds, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| config | build | median step per round (ms) | median (ms) | CPU ms per step, median per round | median | CPU share per round | ratio to the first build (wall / CPU) |")
print("|---|---|---|---|---|---|---|---|")
for config, name in (("baby", "baby (0.80M)"), ("10m", "10.7M, dropout 0")):
    first = None
    for i, build in enumerate(builds):
        runs = [json.load(open(f"{work}/{config}-{i}-{r}.json")) for r in range(1, rounds + 1)]
        steps = [j["median_step_ms"] for j in runs]
        cpu = [statistics.median(j["step_cpu_ms"]) for j in runs]  # the work done: load-independent
        median, cpu_median = statistics.median(steps), statistics.median(cpu)
        first = first or (median, cpu_median)
        step_list = ", ".join(f"{s:.1f}" for s in steps)
        cpu_list = ", ".join(f"{s:.0f}" for s in cpu)
        shares = ", ".join(f"{j['cpu_share']:.2f}" for j in runs)
        print(f"| {name} | {build} | {step_list} | {median:.1f} | {cpu_list} | {cpu_median:.0f} | {shares} "
              f"| {median / first[0]:.3f} / {cpu_median / first[1]:.3f} |")
PY
