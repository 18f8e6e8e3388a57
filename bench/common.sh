# Sourced by the benchmark scripts once they have read their arguments: `work`, a temporary folder
# removed on exit, and the CPU they ran on (lscpu's model name) as the first line of their output.
#   source bench/common.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lscpu | grep -E '^Model name' || true

# `count` random token ids below `vocab` (seeded, the same every run) as the uint16 token file `path`.
#   random_tokens PATH VOCAB [COUNT]   (default 1 << 20)
random_tokens() {
  python3 - "$1" "$2" "${3:-1048576}" <<'PY'
import array, random, sys
rng = random.Random(0)
vocab, count = int(sys.argv[2]), int(sys.argv[3])
array.array("H", (rng.randrange(vocab) for _ in range(count))).tofile(open(sys.argv[1], "wb"))
PY
}

# Fails unless every build folder has the program (a path below the folder).
#   need_program SCRIPT PROGRAM BUILD...   e.g. need_program start_time app/spmd-train "$before" "$after"
need_program() {
  local script=$1 program=$2
  shift 2
  for b in "$@"; do
    [ -x "$b/$program" ] || { echo "$script: no $b/$program" >&2; exit 1; }
  done
}

# The tests' tiny model (2 layers, width 32, vocabulary 72) on the mesh SHAPE ([4, 2]: data x model)
# for STEPS steps, reading DIR/train.bin and DIR/val.bin, written as the config file PATH.
#   tiny_config PATH DIR SHAPE STEPS
tiny_config() {
  cat >"$1" <<YAML
mesh: {shape: $3, axes: [data, model]}
sharding_rules: [[batch, data], [vocab, model], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]
model: {vocab_size: 72, block_size: 16, n_layer: 2, n_head: 8, n_embd: 32, dropout: 0.0}
data: {train: $2/train.bin, val: $2/val.bin, batch_size: 8}
train: {steps: $4, decay_steps: $4, warmup_steps: $(($4 > 1 ? 1 : 0)), lr: 3.0e-3, log_every: 1, eval_every: 0}
runtime: {timeout_s: 120, device: cpu, backend: gloo}
YAML
}
