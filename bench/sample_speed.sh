#!/usr/bin/env bash
# Sampling speed with and without the KV cache on the baby config (configs/bench/baby.yaml; needs
# datasets/shakespeare_char, see bench/NOTES.md). Trains 50 steps into a temp dir, then samples
# interleaved (cache, no cache) x runs and prints each run's tokens/s line and the medians.
# Usage: bash bench/sample_speed.sh [build dir] [tokens] [runs]   (tokens <= 58 stay inside block_size)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/app/spmd-train
tokens=${2:-58}
runs=${3:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" --config configs/bench/baby.yaml --set train.steps=50 --set train.eval_every=0 \
  --set checkpoint.dir="$tmp/ckpt" --set checkpoint.every=50 --set output.dir="$tmp/out" >/dev/null
for ((i = 0; i < runs; i++)); do
  for mode in cache no-cache; do
    flag=$([ "$mode" = no-cache ] && echo --no-cache || true)
    line=$("$bin" sample --checkpoint "$tmp/ckpt" --prompt "ROMEO:" --tokens "$tokens" $flag 2>&1 >/dev/null | tail -1)
    echo "$mode: $line"
    echo "$line" | sed -E 's/.*: ([0-9.]+) tokens\/s.*/\1/' >> "$tmp/$mode"
  done
done
for mode in cache no-cache; do
  echo "$mode median tokens/s: $(sort -n "$tmp/$mode" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
done
