#!/usr/bin/env bash
# A machine with the torch wheel but no CUDA toolkit configures the CUDA build: with nvcc off PATH,
# no CUDA_HOME/CUDA_PATH and CMake's FindCUDAToolkit disabled, the default configure (SPMD_CUDA
# AUTO) and SPMD_CUDA=ON both report "CUDA x.y and NCCL a.b.c built in (from the torch wheel; no
# CUDA toolkit needed)" and link libtorch_cuda and NCCL; -DSPMD_CUDA=OFF reports "CPU only" and
# links neither. Configures only (seconds), in a temporary folder, with the build's own libtorch,
# compiler and tools (read from its CMakeCache.txt). Skipped (77) where this libtorch has no
# CUDA, or is not PyPI's wheel with its nvidia-* packages (then a CUDA build needs the toolkit).
#   bash tests/scripts/cuda_build_without_toolkit.sh SOURCE_DIR BUILD_DIR TORCH_PREFIX CMAKE
set -uo pipefail
source=$1 build=$2 torch=$3 cmake=${4:-cmake}
site=$(dirname "$torch")
if [ ! -e "$torch/lib/libtorch_cuda.so" ]; then
  echo "SKIP: libtorch at $torch has no CUDA (no lib/libtorch_cuda.so): nothing to build CUDA from"
  exit 77
fi
if ! ls "$site"/nvidia/*/include/cuda_runtime_api.h >/dev/null 2>&1 || [ ! -e "$site/nvidia/nccl/include/nccl.h" ]; then
  echo "SKIP: libtorch at $torch has CUDA but not the wheel's nvidia-* packages beside it" \
       "(nvidia/*/include/cuda_runtime_api.h, nvidia/nccl/include/nccl.h): its CUDA build needs a CUDA toolkit"
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "--- last configure's output"; tail -30 "$work/configure.txt" 2>/dev/null; exit 1; }

# No toolkit in sight: every PATH folder holding an nvcc is replaced by a copy of it (links) without
# nvcc, so the other tools it holds (cmake, compilers) stay reachable.
path= n=0
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  if [ -n "$d" ] && [ -e "$d/nvcc" ]; then
    n=$((n + 1)); mkdir -p "$work/path$n"
    for f in "$d"/*; do [ "$(basename "$f")" = nvcc ] || ln -s "$f" "$work/path$n/"; done
    d=$work/path$n
  fi
  path=${path:+$path:}$d
done
export PATH=$path
unset CUDA_HOME CUDA_PATH CUDA_ROOT CUDAToolkit_ROOT CUDACXX NVCC_PREPEND_FLAGS NVCC_APPEND_FLAGS
command -v nvcc >/dev/null && fail "nvcc is still on PATH: $(command -v nvcc)"

# What the build's own configure was given: libtorch and the Debian prefix, compiler, generator's
# program, and (on an offline GPU host, scripts/device-build) the wrapped pkg-config and protobuf.
args=()
for key in CMAKE_PREFIX_PATH CMAKE_CXX_COMPILER CMAKE_MAKE_PROGRAM PKG_CONFIG_EXECUTABLE Protobuf_PROTOC_EXECUTABLE \
           Protobuf_INCLUDE_DIR Protobuf_LIBRARY SPMD_PROTOBUF_LIBRARY; do
  line=$(grep -m1 "^$key:[A-Z]*=" "$build/CMakeCache.txt") && args+=("-D$line")
done
generator=$(grep -m1 "^CMAKE_GENERATOR:INTERNAL=" "$build/CMakeCache.txt" | cut -d= -f2-)

# configure EXPECTED_KIND [ARGS...]: configures $work/build and checks the one line it reports.
configure() {
  local expected=$1; shift
  "$cmake" -S "$source" -B "$work/build" -G "${generator:-Ninja}" --no-warn-unused-cli -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON "${args[@]}" "$@" >"$work/configure.txt" 2>&1 \
    || fail "configure $* failed"
  kind=$(cat "$work/build/spmd-build-kind.txt" 2>/dev/null) || fail "configure $*: no spmd-build-kind.txt"
  grep -qF -- "-- spmd: build: $kind" "$work/configure.txt" || fail "configure $*: its status does not say '$kind'"
  [[ $kind =~ $expected ]] || fail "configure $*: '$kind', expected /$expected/"
  echo "configure ${*:-(default)}: $kind"
}
links() { grep -q -- "$1" "$work/build/build.ninja" 2>/dev/null || grep -rqs -- "$1" "$work/build/app/CMakeFiles"; }

cuda='^CUDA [0-9]+\.[0-9]+ and NCCL [0-9]+\.[0-9]+\.[0-9]+ built in \(from the torch wheel; no CUDA toolkit needed\)$'
configure "$cuda"
links libtorch_cuda.so || fail "the CUDA build does not link libtorch_cuda.so"
links libnccl.so.2 || fail "the CUDA build does not link libnccl.so.2"
configure "$cuda" -DSPMD_CUDA=ON
configure '^CPU only \(configured with SPMD_CUDA=OFF\)$' -DSPMD_CUDA=OFF
links libtorch_cuda.so && fail "the CPU build (SPMD_CUDA=OFF) links libtorch_cuda.so"
links libnccl && fail "the CPU build (SPMD_CUDA=OFF) links libnccl"
echo "PASS: without a CUDA toolkit, the wheel's CUDA build by default and with SPMD_CUDA=ON; CPU only with OFF"
