# spmd-train on Debian 12 (CPU, Gloo), built against the pinned torch wheel as `bash scripts/build`
# builds it on a machine without a CUDA toolkit: build stage with the -dev packages, the wheel and a
# compiler; runtime stage with only the shared libraries the three binaries load.
#
#   docker build -t spmd-train .
#   docker run --rm spmd-train                                    # trains configs/default.yaml
#   docker run --rm spmd-train spmd-inspect --config configs/hybrid-4x2.yaml
#
# Without a Docker engine (as on the project's machines), buildah builds the same file:
#   buildah pull debian:bookworm     # once; offline, load a saved image instead
#   buildah --storage-driver vfs bud --pull-never --isolation chroot -t spmd-train .
# tests/docker/build_and_train.sh does that and trains 3 steps inside. docs/docker.md has more.
# The GPU (CUDA + NCCL) variant is Dockerfile.cuda.

# ---------------------------------------------------------------------------------------------
FROM debian:bookworm AS build
ARG DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# Every package the project builds with, by name, and the torch wheel (scripts/setup-torch), exactly
# as on a developer's machine. Copied alone first so that this (slow) layer stays cached while the
# sources change.
COPY scripts/setup scripts/setup-torch scripts/
# PIP_CERT: a CA bundle pip must trust where PyPI is reached through a local proxy (mount it into
# the build, e.g. buildah bud --volume /etc/ssl/certs/ca-certificates.crt:/etc/host-ca.crt:ro
# --build-arg PIP_CERT=/etc/host-ca.crt); unset elsewhere.
ARG PIP_CERT=""
RUN if [ -z "$PIP_CERT" ]; then unset PIP_CERT; fi \
 && bash scripts/setup && rm -rf /var/lib/apt/lists/* /root/.cache/pip
COPY . .
# One layer (buildah's vfs storage copies every layer whole, and this stage holds the 7 GB wheel):
# - only the three programs (no tests, no benchmarks); the CPU tool (-DSPMD_CUDA=OFF: the wheel's
#   CPU libraries alone, cmake/find_torch.cmake); without ccache, whose cache would not outlive it;
# - the wheel's libraries the programs load (found through their run paths into .venv-torch2, so
#   they keep their paths) and the OpenBLAS the CPU kernels open, collected under /runtime;
# - the default corpus: Debian's fortunes (installed by scripts/setup) -> train.bin, val.bin, meta.json.
RUN SPMD_CMAKE_ARGS="-DCCACHE_PROGRAM=CCACHE_PROGRAM-NOTFOUND -DSPMD_CUDA=OFF" bash scripts/build spmd-train spmd-inspect spmd-prepare \
 && strip --strip-unneeded build/app/spmd-train build/app/spmd-inspect build/app/spmd-prepare \
 && mkdir -p /runtime/usr/local/bin \
 && libs=$(ldd build/app/spmd-* | awk '/=> \/src\/.venv-torch2/ {print $3}' | xargs realpath -s | sort -u) \
 && cp --parents -L $libs /src/.venv-torch2/lib/python3*/site-packages/scipy_openblas32/lib/libscipy_openblas.so /runtime \
 && cp build/app/spmd-train build/app/spmd-inspect build/app/spmd-prepare /runtime/usr/local/bin/ \
 && bash datasets/fortunes/prepare.sh build/app/spmd-prepare

# ---------------------------------------------------------------------------------------------
FROM debian:bookworm AS runtime
ARG DEBIAN_FRONTEND=noninteractive
# Shared libraries from Debian, found with `ldd build/app/spmd-*` and `dpkg -S`: yaml-cpp, fmt,
# spdlog, PCRE2 (BPE), protobuf and ISA-L (TensorBoard events), zlib and zstd (compressed corpora).
# CLI11, nlohmann-json and doctest are
# header-only. libtorch, its OpenMP runtime and the two CUDA runtime libraries libtorch_cpu names
# (it never calls them on a CPU) come from the wheel, copied from the build stage.
RUN printf '%s\n' 'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
      'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' \
      'path-exclude=/usr/share/locale/*' 'path-include=/usr/share/locale/locale.alias' >/etc/dpkg/dpkg.cfg.d/01-nodoc \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      libyaml-cpp0.7 libfmt9 libspdlog1.10 libpcre2-8-0 libprotobuf32 libisal2 zlib1g libzstd1 \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
# /src/.venv-torch2/...: the wheel's libraries where the run paths look; /usr/local/bin: the programs.
COPY --from=build /runtime/ /
# Fail the build, not the first run, when a shared library is missing.
RUN ! ldd /usr/local/bin/spmd-train /usr/local/bin/spmd-inspect /usr/local/bin/spmd-prepare | grep 'not found'

# A non-root user; configs and the corpus are read-only to it, out/ (every config's output and
# checkpoint directory, relative to the working directory) is its own: mount a volume there.
RUN useradd --create-home --uid 1000 --user-group --shell /bin/bash spmd
WORKDIR /home/spmd
COPY configs/ configs/
COPY --from=build /src/datasets/fortunes/train.bin /src/datasets/fortunes/val.bin /src/datasets/fortunes/meta.json datasets/fortunes/
RUN mkdir out && chown spmd:spmd out
USER spmd

LABEL org.opencontainers.image.title="spmd-train" \
      org.opencontainers.image.description="GPT-2 training over a named device mesh (libtorch 2.x from the torch wheel, Gloo, CPU)"
CMD ["spmd-train", "--config", "configs/default.yaml"]
