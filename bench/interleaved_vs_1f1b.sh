#!/usr/bin/env bash
# Interleaved 1F1B against 1F1B on `stages` pipeline ranks, 4 by default (configs/interleaved-4.yaml:
# 8 blocks, 8 microbatches; interleaved with 2 chunks per stage). Runs the two variants in turn,
# `rounds` times (a shared machine's noise hits both alike), with bench_train, and prints per run the median
# step time and the measured bubble (each stage's time blocked receiving, over the step; mean over
# stages) next to the formula (p-1)/(vM+p-1); then the medians per variant.
# Reads Debian's fortunes as bytes (vocab 256), prepared into a temporary folder: a char vocabulary
# can run to thousands of symbols where several languages' fortunes are installed, and its head
# would outweigh a stage of blocks (the formula assumes equal stages).
# A rank needs a core of its own for its idle time to show directly. Where ranks share cores, the
# "replayed" bubble is the one to read: each pass's CPU time (its compute alone) replayed in the
# schedule's order with the measured hand-over time between stages, as a device per rank would run
# it (bench_train's replay_pipeline); with 2 stages on 2 cores both show, and should agree.
# Usage: bash bench/interleaved_vs_1f1b.sh [build dir] [rounds] [steps] [stages]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
steps=${3:-10}
stages=${4:-4}
source bench/common.sh
bash bench/fortunes_bytes.sh "$build" "$work/data"
for ((r = 1; r <= rounds; r++)); do
  for variant in 1f1b interleaved; do
    chunks=$([ "$variant" = interleaved ] && echo 2 || echo 1)
    "$build/bench/bench_train" --config configs/interleaved-4.yaml --nproc "$stages" --warmup 2 \
      --set mesh.shape="[$stages]" --steps "$steps" \
      --set runtime.pipeline_schedule="$variant" --set runtime.virtual_stages="$chunks" \
      --set runtime.threads_per_rank=1 --set model.vocab_size=256 --set data.train="$work/data/train.bin" \
      --set data.val="$work/data/val.bin" --json "$work/$variant-$r.json" >/dev/null
  done
done
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
for variant in ("1f1b", "interleaved"):
    runs = [json.load(open(f"{work}/{variant}-{r}.json")) for r in range(1, rounds + 1)]
    for j in runs:
        p = j["pipeline"]
        per = lambda key: ', '.join(f'{100 * b:.1f}' for b in p[key])
        print(f"{variant:12s} step {j['median_step_ms']:7.1f} ms  bubble measured {100 * p['bubble_measured_mean']:5.1f}% "
              f"(per stage {per('bubble_measured_per_stage')})  replayed {100 * p['bubble_replayed_mean']:5.1f}% "
              f"(per stage {per('bubble_replayed_per_stage')}; free hand-overs {per('bubble_replayed_free_hand_overs_per_stage')}; "
              f"hand-over {p['hand_over_ms']:.2f} ms, passes {p['replayed_passes_ms']:.1f} ms)  "
              f"formula {100 * p['bubble_theory']:5.1f}%  cpu share {100 * j['cpu_share']:.0f}%  load {j['loadavg_1m']:.1f}")
    median = lambda f: statistics.median(f(j) for j in runs)
    print(f"{variant:12s} median over runs: step {median(lambda j: j['median_step_ms']):.1f} ms, "
          f"bubble measured {100 * median(lambda j: j['pipeline']['bubble_measured_mean']):.1f}%, "
          f"replayed {100 * median(lambda j: j['pipeline']['bubble_replayed_mean']):.1f}%, "
          f"replayed passes {median(lambda j: j['pipeline']['replayed_passes_ms']):.1f} ms")
PY
