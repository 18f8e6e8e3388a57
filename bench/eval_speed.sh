#!/usr/bin/env bash
# Multiple-choice scoring speed on the CPU: `spmd-train eval` against the same scoring in PyTorch
# eager (bench/eval_pytorch.py), the same weights, rows and batch, interleaved runs. The model is
# nanoGPT's 10.7M shakespeare-char shape (configs/bench/shakespeare-char.yaml, with biases so that
# the export loads into the PyTorch GPT), trained one step on a generated corpus; the task is
# generated rows of HellaSwag's shape (ctx ~150 characters, 4 endings of ~50), so sequences of
# ~200 tokens. Both sides print acc and acc_norm, which must agree.
# Usage: bash bench/eval_speed.sh [build dir] [examples] [runs] [batch rows]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
examples=${2:-200}
runs=${3:-3}
batch=${4:-16}
bin=$build/app/spmd-train
py=.venv-torch2/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" bench/eval_pytorch.py make --out "$tmp" --examples "$examples"
"$build/app/spmd-prepare" --input "$tmp/corpus.txt" --out "$tmp/data" --vocab char --quiet
"$bin" --config configs/bench/shakespeare-char.yaml --set data.train="$tmp/data/train.bin" \
  --set data.val="$tmp/data/val.bin" --set model.bias=true --set model.dropout=0 --set train.steps=1 \
  --set train.eval_every=0 --set checkpoint.dir="$tmp/ck" --set checkpoint.every=1 --set output.dir="$tmp/out" >/dev/null
"$bin" export --checkpoint "$tmp/ck/step_00000001" --out "$tmp/model.safetensors" >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $examples examples, $batch rows per forward"
for ((i = 0; i < runs; i++)); do
  ours=$("$bin" eval --checkpoint "$tmp/ck" --task "$tmp/task.jsonl" --set data.batch_size="$batch" 2>"$tmp/err")
  echo "spmd-train: ${ours%$'\n'} | $(grep 'examples/s' "$tmp/err")"
  grep 'examples/s' "$tmp/err" | sed -E 's/.*: ([0-9.]+) examples\/s.*/\1/' >> "$tmp/ours"
  theirs=$("$py" bench/eval_pytorch.py score --weights "$tmp/model.safetensors" --meta "$tmp/data/meta.json" \
    --task "$tmp/task.jsonl" --batch "$batch" --threads "$(nproc)")
  echo "pytorch eager: $theirs"
  echo "$theirs" | "$py" -c 'import json, sys; print(json.load(sys.stdin)["examples_per_s"])' >> "$tmp/theirs"
done
median() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "median examples/s: spmd-train $(median "$tmp/ours"), pytorch eager $(median "$tmp/theirs")"
