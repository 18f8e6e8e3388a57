#!/usr/bin/env bash
# bench/gpu_gpt2_124m.sh on a host without a GPU: its preflight says so, it builds nothing, every
# correctness check and every mode fails on its own (none aborts the others), the table is still
# written with a FAIL line per check and a "failed" row per mode, and the script exits 1. On a host with a GPU the modes can run: skipped (77), the GPU run is the test.
#   bash tests/scripts/gpu_bench_fails_alone.sh BUILD_DIR PYTHON
set -uo pipefail
build=$1
python=${2:-python3}
if "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "SKIP: a GPU is visible; run bench/gpu_gpt2_124m.sh itself"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; echo "--- table.md"; cat "$out/table.md" 2>/dev/null; exit 1; }

SPMD_DEVICE_PYTHON=$python bash "$(dirname "$0")/../../bench/gpu_gpt2_124m.sh" "$build" 2 1 "$out" > "$out/stdout.txt" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "exit code $rc, expected 1 (a mode failed)"
grep -q "torch sees no GPU\|cannot import torch" "$out/preflight.txt" || fail "the preflight did not say the host lacks a GPU"
[ -f "$out/table.md" ] || fail "no table.md"
for mode in "spmd-train (bench_train)" "PyTorch eager" "PyTorch compile"; do
  grep -q "^| $mode | failed: see " "$out/table.md" || fail "no failed row for $mode"
done
grep -q "^build: using $build as it is" "$out/stdout.txt" || fail "it did not say it builds nothing here"
for check in "CUDA loss equals CPU loss" "2 ranks on one GPU, backend auto" "flash / efficient SDPA kernel"; do
  grep -q "^- $check.*: FAIL: see " "$out/table.md" || fail "no FAIL line for the check '$check'"
done
for name in cuda-equals-cpu auto-falls-back-to-gloo fused-attention; do
  [ -s "$out/check-$name.txt" ] || fail "the check $name left no log: it did not run"
done
# Every mode ran (each left its own log), so none aborted the ones after it.
for name in ours eager compile; do
  [ -s "$out/$name-1.txt" ] || fail "$name left no log: it did not run"
done
echo "PASS: preflight, no build, three checks and three modes failing alone, table written"
