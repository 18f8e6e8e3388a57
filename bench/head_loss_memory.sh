#!/usr/bin/env bash
# The loss's memory: GPT-2 124M in fp32 at batch 2 x 1024 on one process (configs/gpt2-124m.yaml
# with model.matmul_dtype float32), and the same model with a 128-token vocabulary, for each build
# given. For each: bench_train's peak RSS (ru_maxrss) and peak of live tensors (the caching
# allocator's), the bytes the autograd graph held between forward and backward, and spmd-inspect's
# estimate of the same run. Then what the vocabulary costs beyond the embedding's own state (its
# weight, gradient and AdamW moments, 4 x 4 bytes x padded vocab x 768): what the loss holds, also
# as copies of the fp32 logits (2048 x 50257 x 4 bytes). Token ids are random below 128, so both
# vocabularies train on the same batches. Prints a Markdown table (bench/NOTES.md).
# Usage: bash bench/head_loss_memory.sh BUILD_DIR...   (default: build); hold /tmp/spmd-build.lock
set -euo pipefail
cd "$(dirname "$0")/.."
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(build)
source bench/common.sh
random_tokens "$work/tokens.bin" 128
echo "load average before: $(cat /proc/loadavg)"
common=(--config configs/gpt2-124m.yaml --set model.matmul_dtype=float32 --set data.batch_size=2
        --set data.train="$work/tokens.bin" --set data.val="$work/tokens.bin" --set runtime.device=cpu
        --set runtime.backend=gloo --set train.eval_every=0)
for i in "${!builds[@]}"; do
  for vocab in 50257 128; do
    if [ -x "${builds[$i]}/app/spmd-inspect" ]; then  # a build of bench_train alone has no estimate
      "${builds[$i]}/app/spmd-inspect" "${common[@]}" --set model.vocab_size=$vocab --json > "$work/inspect-$i-$vocab.json"
    fi
    "${builds[$i]}/bench/bench_train" "${common[@]}" --set model.vocab_size=$vocab --warmup 1 --steps 1 \
      --peak-size 512 --json "$work/run-$i-$vocab.json" > /dev/null
  done
done
echo "load average after:  $(cat /proc/loadavg)"
python3 - "$work" "${builds[@]}" <<'PY'
import json, os, sys
work, builds = sys.argv[1], sys.argv[2:]
mib = lambda b: b / 2**20
logits = 2048 * 50257 * 4  # one fp32 copy of the full logits
print("| build | vocab (padded) | peak RSS (MiB) | peak live tensors (MiB) | held for backward (MiB) "
      "| estimate: activations / total (MiB) |")
print("|---|---|---|---|---|---|")
rows = {}
for i, build in enumerate(builds):
    for vocab in (50257, 128):
        run = json.load(open(f"{work}/run-{i}-{vocab}.json"))
        if os.path.exists(f"{work}/inspect-{i}-{vocab}.json"):
            est = json.load(open(f"{work}/inspect-{i}-{vocab}.json"))
            per, padded = est["totals"]["per_device"], est["padded_vocab_size"]
            estimate = f"{mib(per['activations']):.0f} / {mib(per['total']):.0f}"
        else:  # the padding before the vocabulary was padded to 64 ids per shard: none on one process
            per, padded, estimate = None, vocab, "-"
        rows[(i, vocab)] = (run, per, padded)
        print(f"| {build} | {vocab} ({padded}) | {run['max_rss_mib_max']:.0f} | {run['peak_tensor_mib_max_over_ranks']:.0f} "
              f"| {mib(run['graph_bytes_max_over_ranks']):.0f} | {estimate} |")
print()
print("| build | vocab 50257 - vocab 128: peak live tensors / peak RSS (MiB) | the embedding's state (MiB) "
      "| the loss, measured: by live tensors / by RSS (MiB, logits copies) | the loss, estimated (MiB, logits copies) |")
print("|---|---|---|---|---|")
copies = lambda m: f"{m:.0f} ({m / mib(logits):.2f})"
for i, build in enumerate(builds):
    (big, big_est, big_pad), (small, small_est, small_pad) = rows[(i, 50257)], rows[(i, 128)]
    state = mib(4 * 4 * (big_pad - small_pad) * 768)
    tensors = big["peak_tensor_mib_max_over_ranks"] - small["peak_tensor_mib_max_over_ranks"]
    rss = big["max_rss_mib_max"] - small["max_rss_mib_max"]
    # The estimate counts the gradients apart: the loss is what the vocabulary adds to the activations.
    est = "-" if big_est is None else copies(mib(big_est["activations"] - small_est["activations"]))
    print(f"| {build} | {tensors:.0f} / {rss:.0f} | {state:.0f} | {copies(tensors - state)} / {copies(rss - state)} | {est} |")
PY
