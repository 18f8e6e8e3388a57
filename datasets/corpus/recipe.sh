#!/usr/bin/env bash
# From a directory of .jsonl.zst files (OpenWebText, FineWeb-Edu: {"text": ...} a line) to a
# training run of configs/gpt2-124m.yaml: GPT-2 tokens in llm.c shards, then spmd-train on them.
# Each command is printed and timed (docs/corpus-prepare.md shows the times measured here).
#
#   datasets/corpus/recipe.sh CORPUS_DIR GPT2_TOKENIZER_DIR OUT_DIR [BUILD_DIR]
#
# GPT2_TOKENIZER_DIR holds GPT-2's vocab.json + merges.txt (or tokenizer.json). Variables:
# SHARD_TOKENS (default 100000000, as llm.c), VAL_TOKENS (default one shard), NPROC (spmd-train
# processes, default 1), TRAIN_SETS (extra `--set key=value` for spmd-train, e.g. a short smoke run:
# "train.steps=2 data.batch_size=1 train.eval_batches=1").
set -euo pipefail
[[ $# -ge 3 ]] || { sed -n '2,12p' "$0" >&2; exit 2; }
corpus=$1 tokenizer=$2 out=$3
build=${4:-build}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
shard_tokens=${SHARD_TOKENS:-100000000}
val_tokens=${VAL_TOKENS:-$shard_tokens}

timed() {
  echo "+ $*" >&2
  local start=$SECONDS
  "$@"
  echo "recipe: $(($SECONDS - start)) s: $1" >&2
}

# 1. Tokenize every document on every core: val_000000.bin, train_000000.bin, ... + meta.json.
timed "$root/$build/app/spmd-prepare" --input "$corpus/*.jsonl.zst" --out "$out/data" \
  --tokenizer "$tokenizer" --shard-tokens "$shard_tokens" --val-tokens "$val_tokens"

# 2. Train GPT-2 124M on the shards (the config's data paths replaced by the shard globs).
sets=(--set "data.train=$out/data/train_*.bin" --set "data.val=$out/data/val_*.bin"
      --set "output.dir=$out/run" --set "checkpoint.dir=$out/run/ckpt")
for s in ${TRAIN_SETS:-}; do sets+=(--set "$s"); done
timed "$root/$build/app/spmd-train" --config "$root/configs/gpt2-124m.yaml" --nproc "${NPROC:-1}" "${sets[@]}"
