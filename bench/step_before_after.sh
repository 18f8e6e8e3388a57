#!/usr/bin/env bash
# One process's training step, before and after a change: ROUNDS interleaved rounds, each running
# bench_train of BEFORE then AFTER on nanoGPT's baby GPT-2 (fp32 and bf16) and a Llama of the same
# shape (4 layers, 4 query / 2 key-value heads, 128 wide, SwiGLU 352, block 64, batch 12; fp32), on
# random token ids. Prints each round's median step (ms) per build and after/before, then the
# median ratio per model: a shared machine's load moves both builds of a round alike.
#   bash bench/step_before_after.sh BEFORE_BUILD AFTER_BUILD [ROUNDS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?BEFORE build dir}
after=${2:?AFTER build dir}
rounds=${3:-5}
source bench/common.sh
need_program step_before_after bench/bench_train "$before" "$after"
random_tokens "$work/train.bin" 65
random_tokens "$work/val.bin" 65 65536
data=(--set "data.train=$work/train.bin" --set "data.val=$work/val.bin")
llama=(--set model.arch=llama --set model.n_kv_head=2 --set model.intermediate_size=352 --set model.tie_embeddings=false)

step_ms() {  # $1 build, then bench_train flags: the median step, ms
  timeout 900 "$1/bench/bench_train" --config configs/bench/baby.yaml "${data[@]}" --warmup 5 --steps 30 \
    --json "$work/r.json" "${@:2}" >"$work/r.log" 2>&1 || { tail -20 "$work/r.log" >&2; exit 1; }
  python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["median_step_ms"], 2))' "$work/r.json"
}

declare -A ratios
printf '%-6s %-12s %10s %10s %8s\n' round model before_ms after_ms ratio
for r in $(seq 1 "$rounds"); do
  for model in gpt2-fp32 gpt2-bf16 llama-fp32; do
    case $model in
      gpt2-fp32) flags=() ;;
      gpt2-bf16) flags=(--set model.matmul_dtype=bfloat16) ;;
      llama-fp32) flags=("${llama[@]}") ;;
    esac
    b=$(step_ms "$before" "${flags[@]}")
    a=$(step_ms "$after" "${flags[@]}")
    ratio=$(python3 -c "print(round($a / $b, 3))")
    ratios[$model]="${ratios[$model]:-} $ratio"
    printf '%-6s %-12s %10s %10s %8s\n' "$r" "$model" "$b" "$a" "$ratio"
  done
done
for model in gpt2-fp32 gpt2-bf16 llama-fp32; do
  python3 -c "import statistics, sys; v = [float(x) for x in sys.argv[2:]]; print(f'{sys.argv[1]}: after/before median {statistics.median(v):.3f} over {len(v)} rounds ({min(v):.3f}..{max(v):.3f})')" \
    "$model" ${ratios[$model]}
done
