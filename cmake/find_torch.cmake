# Finds libtorch: the torch wheel that scripts/setup installs into .venv-torch2 (scripts/build points
# CMAKE_PREFIX_PATH at it). PyPI's Linux wheel is built with CUDA, and its CMake package insists on
# a CUDA toolkit (nvcc, headers) even to link a CPU-only program. Where no toolkit is installed
# (SPMD_CUDA=AUTO) or CUDA is not wanted (OFF), the wheel's CPU libraries are imported directly:
# libtorch_cpu carries MKL, oneDNN and Gloo either way, so the CPU tool is the same program.
set(SPMD_CUDA AUTO CACHE STRING "Build CUDA and NCCL in: AUTO (when libtorch has CUDA and a CUDA toolkit is installed), ON, OFF")
set_property(CACHE SPMD_CUDA PROPERTY STRINGS AUTO ON OFF)

find_file(SPMD_TORCH_CONFIG TorchConfig.cmake PATH_SUFFIXES Torch share/cmake/Torch NO_CACHE)
if(NOT SPMD_TORCH_CONFIG)
  message(FATAL_ERROR "libtorch not found: bash scripts/setup installs the torch wheel into .venv-torch2, "
                      "and bash scripts/build points CMAKE_PREFIX_PATH at it")
endif()
get_filename_component(_torch_cmake_dir "${SPMD_TORCH_CONFIG}" DIRECTORY)
get_filename_component(_torch_prefix "${_torch_cmake_dir}/../../.." ABSOLUTE)

set(_torch_has_cuda OFF)
if(EXISTS "${_torch_prefix}/lib/libtorch_cuda.so")
  set(_torch_has_cuda ON)
endif()
if(_torch_has_cuda AND NOT SPMD_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND AND SPMD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SPMD_CUDA=ON, but no CUDA toolkit was found (nvcc, cuda_runtime.h): install it, or "
                        "configure with -DSPMD_CUDA=AUTO to build the CPU tool")
  endif()
endif()

if(NOT _torch_has_cuda OR CUDAToolkit_FOUND)
  # This libtorch's package, whatever an earlier configure of the same build folder cached.
  set(Torch_DIR "${_torch_cmake_dir}" CACHE PATH "Torch's CMake package" FORCE)
  find_package(Torch REQUIRED)
  set(SPMD_CUDA_OFF_REASON "")
  if(NOT _torch_has_cuda)
    set(SPMD_CUDA_OFF_REASON "libtorch at ${_torch_prefix} has no CUDA")
  endif()
else()
  # The CPU half of a CUDA wheel, without Torch's CMake package: what find_package(Torch) would
  # give a CPU program (headers, libtorch_cpu + libc10, the c10d defines, C++20).
  file(STRINGS "${_torch_cmake_dir}/TorchConfigVersion.cmake" _torch_version_line REGEX "set\\(PACKAGE_VERSION ")
  string(REGEX REPLACE ".*\"([^\"]+)\".*" "\\1" Torch_VERSION "${_torch_version_line}")
  add_library(spmd_torch_cpu INTERFACE IMPORTED)
  set_target_properties(spmd_torch_cpu PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_torch_prefix}/include;${_torch_prefix}/include/torch/csrc/api/include"
    INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO"
    INTERFACE_COMPILE_FEATURES cxx_std_20
    INTERFACE_LINK_LIBRARIES "${_torch_prefix}/lib/libtorch_cpu.so;${_torch_prefix}/lib/libc10.so")
  set(TORCH_LIBRARIES spmd_torch_cpu)
  set(TORCH_INSTALL_PREFIX "${_torch_prefix}")
  if(SPMD_CUDA STREQUAL "OFF")
    set(SPMD_CUDA_OFF_REASON "configured with SPMD_CUDA=OFF")
  else()
    set(SPMD_CUDA_OFF_REASON "no CUDA toolkit where it was built")
  endif()
  message(STATUS "spmd: no CUDA toolkit used (${SPMD_CUDA_OFF_REASON}): linking the wheel's CPU libraries only")
endif()

# c10 alone (its headers and libc10), in both cases: the exception type spmd_data's error text
# knows, without libtorch (lib/CMakeLists.txt).
add_library(spmd_c10 INTERFACE IMPORTED)
set_target_properties(spmd_c10 PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_torch_prefix}/include"
  INTERFACE_LINK_LIBRARIES "${_torch_prefix}/lib/libc10.so")
