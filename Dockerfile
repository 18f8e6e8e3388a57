# spmd-train on Debian 12 (CPU, Gloo): build stage with the -dev packages and a compiler,
# runtime stage with only the shared libraries the three binaries load.
#
#   docker build -t spmd-train .
#   docker run --rm spmd-train                                    # trains configs/default.yaml
#   docker run --rm spmd-train spmd-inspect --config configs/hybrid-4x2.yaml
#
# Without a Docker engine (as on the project's machines), buildah builds the same file:
#   ../shared/tools/seed-base-image
#   buildah --storage-driver vfs bud --pull-never --isolation chroot -t spmd-train .
# tests/docker/build_and_train.sh does that and trains 3 steps inside. docs/docker.md has more.
# The GPU (CUDA + NCCL) variant is Dockerfile.cuda.

# ---------------------------------------------------------------------------------------------
FROM debian:bookworm AS build
ARG DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# Every package the project builds with, by name, exactly as on a developer's machine. Copied
# alone first so that this (slow) layer stays cached while the sources change.
COPY scripts/setup scripts/setup
RUN bash scripts/setup && rm -rf /var/lib/apt/lists/*
COPY . .
# Only the three programs (no tests, no benchmarks): Release, Ninja, without ccache, whose cache
# would not outlive the build layer anyway.
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCCACHE_PROGRAM=CCACHE_PROGRAM-NOTFOUND \
 && cmake --build build -j "$(nproc)" --target spmd-train spmd-inspect spmd-prepare \
 && strip --strip-unneeded build/app/spmd-train build/app/spmd-inspect build/app/spmd-prepare
# The default corpus: Debian's fortunes (installed by scripts/setup) -> train.bin, val.bin, meta.json.
RUN bash datasets/fortunes/prepare.sh build/app/spmd-prepare

# ---------------------------------------------------------------------------------------------
FROM debian:bookworm AS runtime
ARG DEBIAN_FRONTEND=noninteractive
# Shared libraries only, found with `objdump -p build/app/spmd-* | grep NEEDED` and `dpkg -S`:
#   libtorch1.13        libtorch.so, libtorch_cpu.so, libc10.so (pulls libgloo0, libdnnl2, ...)
#   libopenblas0-openmp libtorch's BLAS through libblas.so.3: ~40x faster than the reference BLAS
#   libyaml-cpp0.7, libfmt9
#   libisal2            CRC-32C of the TensorBoard event files (libprotobuf32 comes with libtorch1.13)
#   libspdlog1.10       linked by the build (dropped by --as-needed while no compiled spdlog call
#                       is made; 0.5 MB kept so that the first one does not break only the image)
# CLI11, nlohmann-json and doctest are header-only.
# libtorch1.13 depends on OpenCV (and through it Qt5, Mesa, FFmpeg, GDAL): they load with it and
# stay. dpkg leaves out what never loads here: documentation, man pages and translations (the
# copyright files stay), and Mesa's OpenGL drivers with the LLVM and Z3 they bring (~170 MB; only
# opened when a program creates an OpenGL context, which a headless trainer never does).
RUN printf '%s\n' 'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
      'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' \
      'path-exclude=/usr/share/locale/*' 'path-include=/usr/share/locale/locale.alias' \
      'path-exclude=/usr/share/lintian/*' >/etc/dpkg/dpkg.cfg.d/01-nodoc \
 && printf '%s\n' 'path-exclude=/usr/lib/x86_64-linux-gnu/dri/*' \
      'path-exclude=/usr/lib/x86_64-linux-gnu/libLLVM-15.so*' \
      'path-exclude=/usr/lib/x86_64-linux-gnu/libz3.so*' >/etc/dpkg/dpkg.cfg.d/02-no-gl-drivers \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      libtorch1.13 libopenblas0-openmp libyaml-cpp0.7 libfmt9 libspdlog1.10 libisal2 zlib1g libzstd1 \
 && alt=$(update-alternatives --list libblas.so.3-x86_64-linux-gnu | grep openblas | head -1) \
 && update-alternatives --set libblas.so.3-x86_64-linux-gnu "$alt" \
 && alt=$(update-alternatives --list liblapack.so.3-x86_64-linux-gnu | grep openblas | head -1) \
 && update-alternatives --set liblapack.so.3-x86_64-linux-gnu "$alt" \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log

COPY --from=build /src/build/app/spmd-train /src/build/app/spmd-inspect /src/build/app/spmd-prepare /usr/local/bin/
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
      org.opencontainers.image.description="GPT-2 training over a named device mesh (libtorch 1.13, Gloo, CPU)"
CMD ["spmd-train", "--config", "configs/default.yaml"]
