#!/usr/bin/env bash
# The sanitized tool (a -DSPMD_SANITIZE=ON build) on the paths that read files and talk between
# processes: spmd-prepare learns a BPE tokenizer; spmd-train writes a checkpoint on DP [2,1],
# resumes it on TP [1,2] and on FSDP [2], exports it, and starts a run from the export
# (train.init_from); and a mixture of experts with its experts over the data axis (the all-to-all),
# two microbatches (the routing pre-pass) and the choice bias. Every command must exit 0 and print no AddressSanitizer, LeakSanitizer or
# UBSan report (every report is fatal: halt_on_error). Small: width 32, 2 layers, a few steps.
#   bash tests/scripts/sanitized_runs.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
reports='ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|UndefinedBehaviorSanitizer'
step=0

# Runs a command with a deadline; fails on a non-zero exit or any sanitizer report in its output.
run() {
  step=$((step + 1))
  echo "sanitized run $step: $*"
  local rc=0
  timeout -k 10 600 "$@" >"$work/out.txt" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] || grep -Eq "$reports" "$work/out.txt"; then
    echo "FAIL: exit code $rc"
    grep -E -A30 "$reports" "$work/out.txt" | head -80 || tail -40 "$work/out.txt"
    exit 1
  fi
}

python3 - "$work/corpus.txt" <<'EOF'
import random, sys
random.seed(7)
words = "the cat sat on a mat while dogs ran far away and birds sang songs of old kings".split()
with open(sys.argv[1], "w") as f:
    for _ in range(3000):
        f.write(" ".join(random.choice(words) for _ in range(12)) + ".\n")
EOF
run "$build/app/spmd-prepare" --input "$work/corpus.txt" --out "$work/data" --vocab bpe:40 --quiet

cat >"$work/tiny.yaml" <<EOF
mesh: {shape: [2, 1], axes: [data, model]}
sharding_rules: [[batch, data], [vocab, model], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]
model: {vocab_size: 320, block_size: 16, n_layer: 2, n_head: 4, n_embd: 32, dropout: 0.1}
data: {train: $work/data/train.bin, val: $work/data/val.bin, batch_size: 4}
train: {steps: 4, decay_steps: 4, warmup_steps: 1, lr: 3.0e-3, log_every: 1, eval_every: 2, eval_batches: 1}
checkpoint: {dir: $work/ck, every: 2, keep: 2}
runtime: {timeout_s: 300, device: cpu, backend: gloo}
EOF
train=("$build/app/spmd-train" --config "$work/tiny.yaml")
run "${train[@]}" --set output.dir="$work/dp" --set train.steps=2
run "${train[@]}" --set output.dir="$work/tp" --set 'mesh.shape=[1,2]' --resume latest
run "${train[@]}" --set output.dir="$work/fsdp" --set 'mesh.shape=[2]' --set 'mesh.axes=[fsdp]' \
  --set 'sharding_rules=[[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], [mlp, null], [seq, null], [kv, null]]' \
  --resume "$work/ck/step_00000002"
run "$build/app/spmd-train" export --checkpoint "$work/ck/step_00000004" --out "$work/export.safetensors"
run "${train[@]}" --set output.dir="$work/hf" --set checkpoint.dir= --set train.init_from="$work/export.safetensors" \
  --set train.steps=1
run "${train[@]}" --set output.dir="$work/moe" --set checkpoint.dir= --set model.arch=llama \
  --set 'model.moe={num_experts: 4, num_experts_per_tok: 2, moe_intermediate_size: 32, expert_bias_update_rate: 0.01}' \
  --set 'sharding_rules=[[batch, data], [expert, data], [vocab, model], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]' \
  --set train.microbatches=2
echo "sanitized runs: $step commands, no sanitizer report"
