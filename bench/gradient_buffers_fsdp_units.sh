#!/usr/bin/env bash
# Two builds of bench_train side by side, interleaved run by run (a shared machine's noise hits
# both alike), on the 10.7M model:
#  - 2 data-parallel ranks (configs/bench/dp2.yaml): peak RSS and peak live tensor bytes per rank,
#    where a .grad that is a view of the gradient bucket saves one gradient copy (10.7M x 4 bytes);
#  - 2 FSDP ranks (configs/bench/fsdp2.yaml, 1 thread each): median step time and time waiting in
#    collectives, where FSDP gathers a block of weights per all-gather instead of one weight.
# Reads Debian's fortunes as bytes (vocab 256), prepared into a temporary folder (the figures do
# not depend on the text).
# Usage: bash bench/gradient_buffers_fsdp_units.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [rounds] [steps] [batch]
# (batch: the global batch of both configs, default theirs, 64 rows of 256 tokens)
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?before build dir}
after=${2:?after build dir}
rounds=${3:-2}
steps=${4:-3}
batch=${5:-64}
source bench/common.sh
bash bench/fortunes_bytes.sh "$after" "$work/data"
data=(--set model.vocab_size=256 --set data.train="$work/data/train.bin" --set data.val="$work/data/val.bin"
      --set model.dropout=0 --set data.batch_size="$batch")
for ((r = 1; r <= rounds; r++)); do
  for which in before after; do
    build=$([ "$which" = before ] && echo "$before" || echo "$after")
    "$build/bench/bench_train" --config configs/bench/dp2.yaml --nproc 2 --warmup 1 --steps "$steps" "${data[@]}" \
      --json "$work/dp2-$which-$r.json" >/dev/null
    # With 2 microbatches the first one's gradients live beside the second one's activations.
    "$build/bench/bench_train" --config configs/bench/dp2.yaml --nproc 2 --warmup 1 --steps "$steps" "${data[@]}" \
      --set train.microbatches=2 --json "$work/dp2m2-$which-$r.json" >/dev/null
    "$build/bench/bench_train" --config configs/bench/fsdp2.yaml --warmup 1 --steps "$steps" "${data[@]}" \
      --set runtime.threads_per_rank=1 --json "$work/fsdp2-$which-$r.json" >/dev/null
  done
done
python3 - "$work" "$rounds" <<'PY'
import json, sys
work, rounds = sys.argv[1], int(sys.argv[2])
for r in range(1, rounds + 1):
    for which in ("before", "after"):
        d = json.load(open(f"{work}/dp2-{which}-{r}.json"))
        m = json.load(open(f"{work}/dp2m2-{which}-{r}.json"))
        f = json.load(open(f"{work}/fsdp2-{which}-{r}.json"))
        gathers = f.get("fsdp_unit_gathers", f.get("fsdp_weight_uses"))
        cpu = sorted(f["step_cpu_ms"])[len(f["step_cpu_ms"]) // 2]
        print(f"round {r} {which:6s} dp2: max RSS {d['max_rss_mib_max']:.1f} MiB, peak tensors "
              f"{d['peak_tensor_mib_max_over_ranks']:.1f} MiB; 2 microbatches: {m['max_rss_mib_max']:.1f} / "
              f"{m['peak_tensor_mib_max_over_ranks']:.1f} MiB | fsdp2: step {f['median_step_ms']:.0f} ms "
              f"(CPU {cpu:.0f} ms, share {f['cpu_share']:.2f}), collectives "
              f"{f['median_step_split_ms']['collectives']:.0f} ms, all-gathers (FSDP uses before, unit gathers "
              f"after) {gathers}  load {f['loadavg_1m']:.1f}")
PY
