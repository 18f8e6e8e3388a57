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
