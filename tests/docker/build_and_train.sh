#!/usr/bin/env bash
# Builds the repository's Dockerfile for real with buildah (no Docker engine needed), trains 3 steps
# of configs/default.yaml inside the image, and checks that the runtime image is lean: no compiler,
# no -dev package, the BLAS named in summary.json, a non-root user who can write out/.
#
#   bash tests/docker/build_and_train.sh          # from anywhere; prints "PASSED" or "SKIPPED: ..."
#
# Optional and slow: a cold build installs the -dev packages and compiles on this machine's cores
# (many minutes; buildah's vfs storage copies every layer whole), a warm one reuses cached layers.
# Not part of scripts/test or .ci/run. Measured on the 2-core machines: cold (empty storage) about
# 10-12 min, after a source change about 8-12 min (apt layer cached, everything recompiled), with
# nothing changed about 2.5 min (vfs still copies whole layers); the 3 training steps take seconds.
# Disk: vfs keeps a full copy of every layer, about 14 GB for one build's cache, and each rebuild
# after a source change adds more; `buildah --storage-driver vfs rmi --prune` reclaims (and drops
# the cache).
#
# Skips (exit 0, "SKIPPED: ...") where buildah is missing or the base image debian:bookworm is not
# in local storage and cannot be fetched. Where it is missing the test runs SPMD_SEED_BASE_IMAGE (a
# command of yours that puts debian:bookworm into buildah's local storage, e.g. one that loads a
# saved archive on an offline host), or else tries `buildah pull docker.io/library/debian:bookworm`.
#
# Environment: SPMD_IMAGE (tag, default spmd-train), SPMD_DOCKER_RMI=1 removes the image afterwards,
# SPMD_SEED_BASE_IMAGE (above).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$(pwd)
image=${SPMD_IMAGE:-spmd-train}
export STORAGE_DRIVER=vfs
B=(buildah --storage-driver vfs)

skip() { echo "SKIPPED: $*"; exit 0; }
fail() { echo "FAILED: $*" >&2; exit 1; }
now() { date +%s; }

command -v buildah >/dev/null 2>&1 || skip "buildah is not installed (apt-get install buildah)"

has_base() {
  "${B[@]}" images --format '{{.Name}}:{{.Tag}}' 2>/dev/null | grep -qx 'docker.io/library/debian:bookworm'
}
if ! has_base; then
  if [[ -n "${SPMD_SEED_BASE_IMAGE:-}" ]]; then
    echo "docker test: seeding debian:bookworm with: $SPMD_SEED_BASE_IMAGE"
    bash -c "$SPMD_SEED_BASE_IMAGE" || skip "SPMD_SEED_BASE_IMAGE failed: $SPMD_SEED_BASE_IMAGE"
  else
    echo "docker test: pulling debian:bookworm"
    "${B[@]}" pull docker.io/library/debian:bookworm >/dev/null 2>&1 ||
      skip "debian:bookworm is not in buildah's local storage and could not be pulled (offline? set SPMD_SEED_BASE_IMAGE)"
  fi
  has_base || skip "debian:bookworm is still not in buildah's local storage"
fi

log_dir=$(mktemp -d)
containers=()
cleanup() {
  local c
  for c in "${containers[@]}"; do "${B[@]}" rm "$c" >/dev/null 2>&1 || true; done
  if [[ "${SPMD_DOCKER_RMI:-0}" == 1 ]]; then "${B[@]}" rmi "$image" >/dev/null 2>&1 || true; fi
  rm -rf "$log_dir"
}
trap cleanup EXIT

# --layers: keep every step's layer so that the next build reuses what did not change.
echo "docker test: building $image (buildah bud; a cold build takes many minutes)"
t0=$(now)
# Where pip trusts a local CA bundle (PIP_CERT), the build gets it too.
cert_args=()
if [[ -n "${PIP_CERT:-}" && -f "$PIP_CERT" ]]; then
  cert_args=(--volume "$PIP_CERT:/etc/host-ca.crt:ro" --build-arg PIP_CERT=/etc/host-ca.crt)
fi
if ! "${B[@]}" bud --pull-never --layers --isolation chroot "${cert_args[@]}" -t "$image" . >"$log_dir/build.log" 2>&1; then
  tail -n 60 "$log_dir/build.log" >&2
  fail "buildah bud failed (last lines above)"
fi
echo "docker test: built in $(( $(now) - t0 )) s; image size $("${B[@]}" images --format '{{.Size}}' "localhost/$image:latest" | head -1)"

ctr=$("${B[@]}" from --pull-never "$image")
containers+=("$ctr")
in_ctr() { "${B[@]}" run --isolation chroot "$ctr" -- "$@"; }

# 1. Three training steps of the default job (2 Gloo ranks on a [2, 1] mesh), as the image's user.
t0=$(now)
if ! in_ctr spmd-train --config configs/default.yaml --set train.steps=3 --set train.eval_every=0 \
    >"$log_dir/train.log" 2>&1; then
  cat "$log_dir/train.log" >&2
  fail "spmd-train exited non-zero inside the image"
fi
cat "$log_dir/train.log"
grep -Eq '^(\[rank 0\] )?step +3/3 \| loss [0-9]+\.[0-9]+ ' "$log_dir/train.log" || fail "no loss line for step 3/3"
grep -Eq '^(\[rank 0\] )?step +1/3 \| loss [0-9]+\.[0-9]+ ' "$log_dir/train.log" || fail "no loss line for step 1/3"
grep -Eq 'done: 3 steps in .*final loss [0-9]+\.[0-9]+' "$log_dir/train.log" || fail "no 'done: 3 steps' line"
echo "docker test: trained 3 steps in $(( $(now) - t0 )) s"

# 2. spmd-inspect prints a layout.
in_ctr spmd-inspect --config configs/hybrid-4x2.yaml >"$log_dir/inspect.log" 2>&1 \
  || { cat "$log_dir/inspect.log" >&2; fail "spmd-inspect exited non-zero inside the image"; }
grep -q '^mesh \[4, 2\] (data, model): 8 devices' "$log_dir/inspect.log" || { cat "$log_dir/inspect.log" >&2; fail "spmd-inspect printed no 4x2 layout"; }

# 3. The runtime image: no compiler, no -dev package, a named BLAS, non-root, out/ writable, metrics written.
in_ctr sh -c 'for c in gcc g++ cc c++ clang clang++ x86_64-linux-gnu-gcc-12 x86_64-linux-gnu-g++-12; do
                command -v "$c" && exit 1; done; exit 0' >"$log_dir/cc.log" 2>&1 \
  || fail "the runtime image has a compiler: $(tr '\n' ' ' <"$log_dir/cc.log")"
dev=$(in_ctr sh -c "dpkg-query -W -f='\${binary:Package}\n' | grep -E -- '-dev(:|\$)' || true")
[[ -z "$dev" ]] || fail "the runtime image has -dev packages: $(echo $dev)"
blas=$(in_ctr grep -o '"blas": *"[^"]*"' out/default/summary.json || true)
[[ "$blas" == *MKL* || "$blas" == *OpenBLAS* ]] || fail "summary.json names no BLAS the kernels run on: $blas"
uid=$(in_ctr id -u)
[[ "$uid" != 0 ]] || fail "the image runs as root"
in_ctr test -s out/default/metrics.jsonl || fail "training wrote no out/default/metrics.jsonl (is out/ writable?)"

echo "docker test: image $image: no compiler, no -dev packages, BLAS $blas, uid $uid"
echo "PASSED: the docker image builds, trains and is lean"
echo "docker: 1 passed, 0 failed"
