# Finds libtorch: the torch wheel that scripts/setup installs into .venv-torch2 (scripts/build points
# CMAKE_PREFIX_PATH at it), and decides whether CUDA and NCCL are built in (SPMD_WITH_CUDA).
#
# The project compiles no CUDA kernels at build time (lib/kernels/cuda's are compiled at run time by
# NVRTC, whose nvrtc.h and libnvrtc the wheel ships too): a CUDA build only includes c10/cuda,
# ATen/cuda, nvrtc.h and c10d's NCCL headers and links libtorch_cuda, libc10_cuda, cudart and
# NCCL. PyPI's Linux wheel ships all of that: libtorch_cuda in torch/lib, and the CUDA runtime
# (cuda_runtime_api.h, libcudart), NVRTC and NCCL (nccl.h, libnccl) with their headers in its
# nvidia-* packages beside torch (site-packages/nvidia: cu13/ for CUDA 13 wheels; cuda_runtime/,
# cuda_nvrtc/ and nccl/ for CUDA 12 ones). So where the wheel has them,
# CUDA is built from the wheel alone, with no CUDA toolkit (no nvcc), through an imported target
# made here, whether or not a toolkit is installed: every host then gets the same build, from the
# very headers of the cudart and NCCL that libtorch_cuda loads (a toolkit of another CUDA version,
# 12.x beside a CUDA 13 wheel, would mix its headers with the wheel's libraries), and no host needs
# TORCH_CUDA_ARCH_LIST or a GPU probe. Torch's own CMake package (which insists on a toolkit for a
# CUDA libtorch) is used only for a libtorch without those packages (a torch built from source
# against the host's toolkit) or one without CUDA.
#
#   SPMD_CUDA=AUTO  CUDA when libtorch has it (the wheel's packages, else a toolkit); else CPU only
#   SPMD_CUDA=ON    CUDA, or the configure fails saying what is missing (scripts/device-build)
#   SPMD_CUDA=OFF   the CPU tool: the wheel's CPU libraries only (scripts/check-cpu-only-build)
#
# Sets TORCH_LIBRARIES, TORCH_INSTALL_PREFIX, Torch_VERSION; SPMD_WITH_CUDA and, with it,
# SPMD_CUDA_VERSION, SPMD_CUDA_FROM, SPMD_NCCL_INCLUDE_DIR, SPMD_NCCL_LIBRARY, SPMD_NCCL_VERSION;
# without it SPMD_CUDA_OFF_REASON. cmake/torch.cmake applies them.
set(SPMD_CUDA AUTO CACHE STRING "Build CUDA and NCCL in: AUTO (when libtorch has CUDA: from the torch wheel's nvidia-* packages, no toolkit needed), ON (or fail), OFF (CPU only)")
set_property(CACHE SPMD_CUDA PROPERTY STRINGS AUTO ON OFF)
if(NOT SPMD_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "SPMD_CUDA=${SPMD_CUDA}: use AUTO, ON or OFF")
endif()

find_file(SPMD_TORCH_CONFIG TorchConfig.cmake PATH_SUFFIXES Torch share/cmake/Torch NO_CACHE)
if(NOT SPMD_TORCH_CONFIG)
  message(FATAL_ERROR "libtorch not found: bash scripts/setup installs the torch wheel into .venv-torch2, "
                      "and bash scripts/build points CMAKE_PREFIX_PATH at it")
endif()
get_filename_component(_torch_cmake_dir "${SPMD_TORCH_CONFIG}" DIRECTORY)
get_filename_component(_torch_prefix "${_torch_cmake_dir}/../../.." ABSOLUTE)
get_filename_component(_spmd_site_packages "${_torch_prefix}/.." ABSOLUTE)
file(STRINGS "${_torch_cmake_dir}/TorchConfigVersion.cmake" _torch_version_line REGEX "set\\(PACKAGE_VERSION ")
string(REGEX REPLACE ".*\"([^\"]+)\".*" "\\1" Torch_VERSION "${_torch_version_line}")

set(SPMD_WITH_CUDA OFF)
set(SPMD_CUDA_OFF_REASON "")
set(_spmd_cuda_how "")  # wheel, package or cpu: which of the three ways below links libtorch

if(NOT EXISTS "${_torch_prefix}/lib/libtorch_cuda.so")
  set(SPMD_CUDA_OFF_REASON "libtorch at ${_torch_prefix} has no CUDA")
  if(SPMD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SPMD_CUDA=ON, but ${SPMD_CUDA_OFF_REASON} (no lib/libtorch_cuda.so): install PyPI's Linux "
                        "torch wheel, or configure with -DSPMD_CUDA=AUTO to build the CPU tool")
  endif()
  set(_spmd_cuda_how package)  # Torch's package needs no toolkit for a libtorch without CUDA
elseif(SPMD_CUDA STREQUAL "OFF")
  set(SPMD_CUDA_OFF_REASON "configured with SPMD_CUDA=OFF")
  set(_spmd_cuda_how cpu)
else()
  # What a CUDA build takes from the wheel, each looked for where the wheel's packages put it.
  set(_spmd_wheel_missing)
  file(GLOB _spmd_nvidia_include_dirs LIST_DIRECTORIES true "${_spmd_site_packages}/nvidia/*/include")
  find_path(_spmd_cudart_include_dir cuda_runtime_api.h PATHS ${_spmd_nvidia_include_dirs} NO_DEFAULT_PATH NO_CACHE)
  find_path(_spmd_wheel_nccl_include_dir nccl.h PATHS "${_spmd_site_packages}/nvidia/nccl/include" NO_DEFAULT_PATH
            NO_CACHE)
  # Some CUDA 13 wheels' cuda_runtime_api.h includes crt/host_defines.h, which their cudart package
  # does not ship (the nvcc package does, and triton, a dependency of torch, carries a copy).
  find_path(_spmd_cuda_crt_include_dir crt/host_defines.h PATHS ${_spmd_nvidia_include_dirs}
            "${_spmd_site_packages}/triton/backends/nvidia/include" NO_DEFAULT_PATH NO_CACHE)
  # cuda_fp16.h includes nv/target (CCCL's), which some wheels keep under include/cccl and others
  # lack (torch 2.11's CUDA 13.0 packages): then a CUDA toolkit's copy serves (nvcc's, CUDA_HOME's,
  # /usr/local/cuda's; its CCCL folder first, so that none of its other headers is seen), or the
  # folder SPMD_CCCL_INCLUDE_DIR names.
  set(SPMD_CCCL_INCLUDE_DIR "" CACHE PATH "A folder holding nv/target (CCCL), where the torch wheel's CUDA headers lack it")
  set(_spmd_cccl_dirs)
  foreach(_dir ${_spmd_nvidia_include_dirs})
    list(APPEND _spmd_cccl_dirs "${_dir}" "${_dir}/cccl")
  endforeach()
  list(APPEND _spmd_cccl_dirs "${_spmd_site_packages}/triton/backends/nvidia/include")
  find_program(_spmd_nvcc nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH PATH_SUFFIXES bin PATHS /usr/local/cuda/bin NO_CACHE)
  set(_spmd_toolkit_roots "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" /usr/local/cuda)
  if(_spmd_nvcc)
    get_filename_component(_spmd_nvcc_root "${_spmd_nvcc}/../.." ABSOLUTE)
    list(PREPEND _spmd_toolkit_roots "${_spmd_nvcc_root}")
  endif()
  foreach(_root ${_spmd_toolkit_roots})
    if(_root)
      list(APPEND _spmd_cccl_dirs "${_root}/include/cccl" "${_root}/targets/x86_64-linux/include/cccl"
                                  "${_root}/include" "${_root}/targets/x86_64-linux/include")
    endif()
  endforeach()
  find_path(_spmd_cuda_cccl_include_dir nv/target PATHS ${_spmd_cccl_dirs} ${SPMD_CCCL_INCLUDE_DIR} NO_DEFAULT_PATH
            NO_CACHE)
  # nvrtc.h: the GPU kernels are compiled at run time (lib/kernels/cuda); beside cuda_runtime_api.h
  # in CUDA 13 wheels, in nvidia/cuda_nvrtc/include in CUDA 12 ones.
  find_path(_spmd_nvrtc_include_dir nvrtc.h PATHS ${_spmd_nvidia_include_dirs} NO_DEFAULT_PATH NO_CACHE)
  if(NOT _spmd_nvrtc_include_dir)
    list(APPEND _spmd_wheel_missing "nvidia/*/include/nvrtc.h")
  endif()
  set(_spmd_cuda_include_dirs "${_spmd_cudart_include_dir}")
  foreach(_dir IN ITEMS "${_spmd_cuda_crt_include_dir}" "${_spmd_cuda_cccl_include_dir}" "${_spmd_nvrtc_include_dir}")
    if(_dir AND NOT _dir IN_LIST _spmd_cuda_include_dirs)
      list(APPEND _spmd_cuda_include_dirs "${_dir}")
    endif()
  endforeach()
  find_file(_spmd_wheel_nccl_library libnccl.so.2 PATHS "${_spmd_site_packages}/nvidia/nccl/lib" NO_DEFAULT_PATH
            NO_CACHE)
  foreach(_file lib/libc10_cuda.so include/c10/cuda/CUDAFunctions.h
                include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp)
    if(NOT EXISTS "${_torch_prefix}/${_file}")
      list(APPEND _spmd_wheel_missing "torch/${_file}")
    endif()
  endforeach()
  if(_spmd_cudart_include_dir AND NOT _spmd_cuda_cccl_include_dir
     AND EXISTS "${_spmd_cudart_include_dir}/cuda_fp16.h")
    file(STRINGS "${_spmd_cudart_include_dir}/cuda_fp16.h" _spmd_fp16_needs_cccl REGEX "#include <nv/target>")
    if(_spmd_fp16_needs_cccl)
      list(APPEND _spmd_wheel_missing "nv/target (CCCL, which cuda_fp16.h includes; give its folder as -DSPMD_CCCL_INCLUDE_DIR=)")
    endif()
  endif()
  if(_spmd_cudart_include_dir)
    # CUDART_VERSION 13020 is CUDA 13.2; libcudart.so.13 beside the header (nvidia/<package>/lib).
    file(STRINGS "${_spmd_cudart_include_dir}/cuda_runtime_api.h" _cudart_version REGEX "^#define CUDART_VERSION +[0-9]+")
    string(REGEX REPLACE "[^0-9]*([0-9]+).*" "\\1" _cudart_version "${_cudart_version}")
    math(EXPR _cuda_major "${_cudart_version} / 1000")
    math(EXPR _cuda_minor "(${_cudart_version} % 1000) / 10")
    set(_spmd_wheel_cuda_version "${_cuda_major}.${_cuda_minor}")
    get_filename_component(_spmd_cudart_library "${_spmd_cudart_include_dir}/../lib/libcudart.so.${_cuda_major}"
                           ABSOLUTE)
    if(NOT EXISTS "${_spmd_cudart_library}")
      list(APPEND _spmd_wheel_missing "${_spmd_cudart_library}")
    endif()
  else()
    list(APPEND _spmd_wheel_missing "nvidia/*/include/cuda_runtime_api.h")
  endif()
  if(NOT _spmd_wheel_nccl_include_dir)
    list(APPEND _spmd_wheel_missing "nvidia/nccl/include/nccl.h")
  endif()
  if(NOT _spmd_wheel_nccl_library)
    list(APPEND _spmd_wheel_missing "nvidia/nccl/lib/libnccl.so.2")
  endif()

  if(NOT _spmd_wheel_missing)
    set(_spmd_cuda_how wheel)
  else()
    list(JOIN _spmd_wheel_missing ", " _spmd_wheel_missing)
    set(_spmd_wheel_missing "libtorch at ${_torch_prefix} has CUDA, but not the torch wheel's CUDA runtime and NCCL packages beside it: no ${_spmd_wheel_missing}")
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      set(_spmd_cuda_how package)
    elseif(SPMD_CUDA STREQUAL "ON")
      message(FATAL_ERROR "SPMD_CUDA=ON, but ${_spmd_wheel_missing}, and no CUDA toolkit was found either: install PyPI's "
                          "torch wheel with its nvidia-* dependencies, or configure with -DSPMD_CUDA=OFF to build the CPU tool")
    else()
      set(SPMD_CUDA_OFF_REASON "${_spmd_wheel_missing}, and no CUDA toolkit")
      set(_spmd_cuda_how cpu)
    endif()
  endif()
endif()

set(TORCH_INSTALL_PREFIX "${_torch_prefix}")
if(_spmd_cuda_how STREQUAL "wheel")
  # What find_package(Torch) gives a CUDA program (headers, libtorch_cuda/libc10_cuda over
  # libtorch_cpu/libc10, cudart, the c10d defines, C++20), from the wheel alone. libtorch_cuda is
  # linked even where nothing names its symbols (--no-as-needed, as Torch's package does): loading it
  # registers the CUDA kernels and hooks. The plain paths after it give CMake the run-path folders.
  # Only the CUDA module (lib/kernels/cuda_module.h) links it; everything else takes the CPU half
  # below, so that a process on a host without a GPU never loads the CUDA libraries.
  add_library(spmd_torch_cuda INTERFACE IMPORTED)
  set_target_properties(spmd_torch_cuda PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_torch_prefix}/include;${_torch_prefix}/include/torch/csrc/api/include;${_spmd_cuda_include_dirs}"
    INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO;USE_C10D_NCCL;USE_CUDA"
    INTERFACE_COMPILE_FEATURES cxx_std_20
    INTERFACE_LINK_LIBRARIES "-Wl,--push-state,--no-as-needed,${_torch_prefix}/lib/libtorch_cuda.so,--pop-state;${_torch_prefix}/lib/libtorch_cuda.so;${_torch_prefix}/lib/libc10_cuda.so;${_torch_prefix}/lib/libtorch_cpu.so;${_torch_prefix}/lib/libc10.so;${_spmd_cudart_library}")
  set(SPMD_TORCH_CUDA_LIBRARIES spmd_torch_cuda)
  set(SPMD_WITH_CUDA ON)
  set(SPMD_CUDA_VERSION "${_spmd_wheel_cuda_version}")
  set(SPMD_CUDA_FROM "from the torch wheel; no CUDA toolkit needed")
  set(SPMD_NCCL_INCLUDE_DIR "${_spmd_wheel_nccl_include_dir}")
  set(SPMD_NCCL_LIBRARY "${_spmd_wheel_nccl_library}")
elseif(_spmd_cuda_how STREQUAL "package")
  # This libtorch's package, whatever an earlier configure of the same build folder cached.
  set(Torch_DIR "${_torch_cmake_dir}" CACHE PATH "Torch's CMake package" FORCE)
  find_package(Torch REQUIRED)
  if(TARGET torch_cuda)
    set(SPMD_WITH_CUDA ON)
    set(SPMD_CUDA_VERSION "${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
    set(SPMD_CUDA_FROM "with the CUDA toolkit ${CUDAToolkit_VERSION} in ${CUDAToolkit_BIN_DIR} and Torch's CMake package: ${_spmd_wheel_missing}")
    # NCCL: the wheel's nvidia-nccl package where it is there (the NCCL libtorch_cuda loads), else
    # the toolkit's.
    set(SPMD_NCCL_INCLUDE_DIR "${_spmd_wheel_nccl_include_dir}")
    set(SPMD_NCCL_LIBRARY "${_spmd_wheel_nccl_library}")
    if(NOT SPMD_NCCL_INCLUDE_DIR OR NOT SPMD_NCCL_LIBRARY)
      find_path(_spmd_toolkit_nccl_include_dir nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} NO_CACHE)
      find_library(_spmd_toolkit_nccl_library NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} NO_CACHE)
      set(SPMD_NCCL_INCLUDE_DIR "${_spmd_toolkit_nccl_include_dir}")
      set(SPMD_NCCL_LIBRARY "${_spmd_toolkit_nccl_library}")
    endif()
    if(NOT SPMD_NCCL_INCLUDE_DIR OR NOT SPMD_NCCL_LIBRARY)
      message(FATAL_ERROR "libtorch at ${_torch_prefix} has CUDA, but nccl.h / libnccl were not found (looked in "
                          "${_spmd_site_packages}/nvidia/nccl and the CUDA toolkit)")
    endif()
  endif()
endif()
if(_spmd_cuda_how STREQUAL "package")
  set(SPMD_TORCH_CUDA_LIBRARIES ${TORCH_LIBRARIES})  # Torch's package links CUDA into everything
else()
  # The CPU half of a CUDA wheel, without Torch's CMake package: what find_package(Torch) would
  # give a CPU program (headers, libtorch_cpu + libc10, the c10d defines, C++20).
  add_library(spmd_torch_cpu INTERFACE IMPORTED)
  set_target_properties(spmd_torch_cpu PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_torch_prefix}/include;${_torch_prefix}/include/torch/csrc/api/include"
    INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO"
    INTERFACE_COMPILE_FEATURES cxx_std_20
    INTERFACE_LINK_LIBRARIES "${_torch_prefix}/lib/libtorch_cpu.so;${_torch_prefix}/lib/libc10.so")
  set(TORCH_LIBRARIES spmd_torch_cpu)
endif()

if(SPMD_WITH_CUDA)
  file(STRINGS "${SPMD_NCCL_INCLUDE_DIR}/nccl.h" _nccl_version REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^0-9;]*([0-9]+)[^;]*" "\\1" _nccl_version "${_nccl_version}")
  string(REPLACE ";" "." SPMD_NCCL_VERSION "${_nccl_version}")
endif()

# c10 alone (its headers and libc10), in every case: the exception type spmd_data's error text
# knows, without libtorch (lib/CMakeLists.txt).
add_library(spmd_c10 INTERFACE IMPORTED)
set_target_properties(spmd_c10 PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_torch_prefix}/include"
  INTERFACE_LINK_LIBRARIES "${_torch_prefix}/lib/libc10.so")
