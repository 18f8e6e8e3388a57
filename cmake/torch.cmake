# What the libtorch found by cmake/find_torch.cmake needs at configure time: its own libraries
# ahead of any system copy, its libgomp, SPMD_WITH_CUDA with NCCL and run paths (when CUDA is
# built in), the fmt shim, and the line saying what was built in (spmd-build-kind.txt). Included
# from the top-level CMakeLists.txt after every find_package; spmd_use_torch(spmd) is called once
# the library target exists.

# TorchConfig.cmake looks libc10 up with find_library(... PATHS <prefix>/lib), which searches the
# system directories first: with Debian's libtorch-dev installed beside the wheel, the wheel build
# would link Debian's /usr/lib/x86_64-linux-gnu/libc10.so. Take every library the prefix has from there.
set(_spmd_torch_libraries)
foreach(_lib IN LISTS TORCH_LIBRARIES)
  if(IS_ABSOLUTE "${_lib}")
    get_filename_component(_name "${_lib}" NAME)
    if(EXISTS "${TORCH_INSTALL_PREFIX}/lib/${_name}")
      set(_lib "${TORCH_INSTALL_PREFIX}/lib/${_name}")
    endif()
  endif()
  list(APPEND _spmd_torch_libraries "${_lib}")
endforeach()
set(TORCH_LIBRARIES ${_spmd_torch_libraries})

# The wheel brings its own OpenMP runtime (torch/lib/libgomp.so.1, older than GCC 12's), which
# libtorch_cpu loads; a process has one libgomp.so.1, so link our OpenMP code against that one
# (lib/CMakeLists.txt's find_package(OpenMP) takes this cache entry): a symbol it lacks then fails
# the link instead of the run, and CMake need not warn that the run path hides GCC's libgomp.
if(EXISTS "${TORCH_INSTALL_PREFIX}/lib/libgomp.so.1")
  set(OpenMP_gomp_LIBRARY "${TORCH_INSTALL_PREFIX}/lib/libgomp.so.1" CACHE FILEPATH "libtorch's OpenMP runtime"
      FORCE)
endif()

# The one compile-time switch, SPMD_WITH_CUDA, and NCCL's header and library: cmake/find_torch.cmake
# decided them (from the wheel's nvidia-* packages, no CUDA toolkit needed, where it has them).
if(SPMD_WITH_CUDA)
  # Binaries run from the build tree without LD_LIBRARY_PATH: they need libcudart and libnccl
  # themselves, and must take the wheel's copies (those libtorch_cuda was built with and loads
  # through its own run path), ahead of any toolkit's lib folder that Torch's package adds.
  get_filename_component(_spmd_site_packages "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
  file(GLOB _spmd_nvidia_lib_dirs LIST_DIRECTORIES true "${_spmd_site_packages}/nvidia/*/lib")
  list(PREPEND CMAKE_BUILD_RPATH "${TORCH_INSTALL_PREFIX}/lib" ${_spmd_nvidia_lib_dirs})
endif()

# The wheel ships its own fmt (12) in include/, which (as -isystem) would hide Debian's /usr/include/fmt
# (9), the fmt the project links (libfmt, and spdlog built on it). A shim directory, searched with
# plain -I before every -isystem directory, sends <fmt/...> back to fmt::fmt's headers, so every
# translation unit (libtorch's own c10d headers included) sees fmt 9 only.
get_target_property(_fmt_include_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
find_path(SPMD_FMT_INCLUDE_DIR fmt/format.h PATHS ${_fmt_include_dirs} /usr/include NO_DEFAULT_PATH)
get_filename_component(_torch_fmt "${TORCH_INSTALL_PREFIX}/include/fmt" REALPATH)
get_filename_component(_project_fmt "${SPMD_FMT_INCLUDE_DIR}/fmt" REALPATH)
if(EXISTS "${_torch_fmt}" AND NOT _torch_fmt STREQUAL _project_fmt)
  set(SPMD_FMT_SHIM_DIR "${PROJECT_BINARY_DIR}/fmt-shim")
  file(MAKE_DIRECTORY "${SPMD_FMT_SHIM_DIR}")
  file(CREATE_LINK "${SPMD_FMT_INCLUDE_DIR}/fmt" "${SPMD_FMT_SHIM_DIR}/fmt" SYMBOLIC)
  include_directories(BEFORE "${SPMD_FMT_SHIM_DIR}")
endif()

# OpenBLAS beside the wheel (the scipy-openblas32 wheel, from scripts/setup-torch): the fused CPU
# kernels' second BLAS, loaded at run time (kernels/cpu/blas_library.h), faster than MKL on AMD.
get_filename_component(_spmd_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
find_file(SPMD_OPENBLAS_LIBRARY libscipy_openblas.so PATHS "${_spmd_site}/scipy_openblas32/lib" NO_DEFAULT_PATH)
if(SPMD_OPENBLAS_LIBRARY)
  message(STATUS "spmd: OpenBLAS for the CPU kernels: ${SPMD_OPENBLAS_LIBRARY}")
else()
  message(STATUS "spmd: no scipy-openblas32 beside torch: the CPU kernels use libtorch's BLAS only")
endif()

# What was built in, in one line: the configure's status, and spmd-build-kind.txt in the build
# folder, which scripts/build and scripts/device-build print as their last line.
if(SPMD_WITH_CUDA)
  set(SPMD_BUILD_KIND "CUDA ${SPMD_CUDA_VERSION} and NCCL ${SPMD_NCCL_VERSION} built in (${SPMD_CUDA_FROM})")
else()
  set(SPMD_BUILD_KIND "CPU only (${SPMD_CUDA_OFF_REASON})")
endif()
message(STATUS "spmd: libtorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}")
message(STATUS "spmd: build: ${SPMD_BUILD_KIND}")
file(WRITE "${PROJECT_BINARY_DIR}/spmd-build-kind.txt" "${SPMD_BUILD_KIND}\n")

# Applies the switch to the library target; everything linking it inherits it.
function(spmd_use_torch target)
  # Why CUDA is not built in, for the runtime line and the error that refuses device: cuda.
  target_compile_definitions(${target} PUBLIC "SPMD_CUDA_OFF_REASON=\"${SPMD_CUDA_OFF_REASON}\"")
  # A CUDA build: the CUDA module exists (lib/kernels/cuda_module.h), which alone links CUDA.
  if(SPMD_WITH_CUDA)
    target_compile_definitions(${target} PUBLIC SPMD_WITH_CUDA=1)
  endif()
endfunction()
