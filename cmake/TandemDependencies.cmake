# Every third-party dependency, found through its own CMake package (see docs/building.md).
find_package(Threads REQUIRED)
find_package(TBB REQUIRED)
find_package(ucx REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
# OpenSSL's libcrypto (libssl-dev): SHA-256 checksums and the job's HMAC challenge-responses.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
# Gloo (CPU collectives across processes, transport/gloo_collectives): its CMake package, from
# libgloo-dev, defines the imported target `gloo`.
find_package(Gloo CONFIG QUIET)
if(NOT Gloo_FOUND OR NOT TARGET gloo)
  message(FATAL_ERROR "Tandem needs Gloo (the CMake package 'Gloo' with the target 'gloo'), "
    "which was not found: install libgloo-dev (scripts/setup does), or set Gloo_DIR to the "
    "directory that holds GlooConfig.cmake")
endif()
if(NOT DEFINED BLA_VENDOR)
  set(BLA_VENDOR OpenBLAS)
endif()
find_package(BLAS REQUIRED)
# oneDNN (libdnnl-dev): the CPU kernels' bf16 matrix products. Debian's build threads through
# OpenMP (libgomp), so the kernels also set libgomp's per-thread team size (bf16_gemm.cpp);
# link the same runtime oneDNN loads, never a second one. Debian's dnnl-config.cmake also finds
# OpenCL (its GPU runtime), hence ocl-icd-opencl-dev in scripts/setup; without it that config
# stops configure with a bare "Could NOT find OpenCL", so it is looked for first.
find_package(OpenCL QUIET)
if(NOT OpenCL_FOUND)
  message(FATAL_ERROR "Tandem needs the OpenCL development files, which Debian's oneDNN CMake "
    "package (libdnnl-dev, for the CPU bf16 GEMMs) requires, and they were not found: install "
    "ocl-icd-opencl-dev (scripts/setup does)")
endif()
find_package(dnnl CONFIG QUIET)
if(NOT dnnl_FOUND OR NOT TARGET DNNL::dnnl)
  message(FATAL_ERROR "Tandem needs oneDNN (the CMake package 'dnnl' with the target "
    "'DNNL::dnnl'), which was not found: install libdnnl-dev (scripts/setup does), or set "
    "dnnl_DIR to the directory that holds dnnl-config.cmake")
endif()
find_library(TANDEM_GOMP_LIBRARY NAMES gomp libgomp.so.1)
if(NOT TANDEM_GOMP_LIBRARY)
  message(FATAL_ERROR "Tandem needs libgomp (the OpenMP runtime that Debian's oneDNN uses) "
    "for the CPU bf16 GEMM's thread control, which was not found: install libgomp1")
endif()
if(TANDEM_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TANDEM_BUILD_BENCHES AND NOT TANDEM_RUNTIME_ONLY)
  find_package(benchmark REQUIRED)
endif()

# Header-only libraries: Asio (standalone) and moodycamel's concurrentqueue.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(tandem_asio INTERFACE)
target_include_directories(tandem_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(tandem_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(tandem_asio INTERFACE Threads::Threads)

find_path(CONCURRENTQUEUE_INCLUDE_DIR concurrentqueue/concurrentqueue.h REQUIRED)
add_library(tandem_concurrentqueue INTERFACE)
target_include_directories(tandem_concurrentqueue SYSTEM INTERFACE ${CONCURRENTQUEUE_INCLUDE_DIR})

# CUDA: optional. A CPU-only build is the default path, never a second-class one.
set(TANDEM_HAVE_CUDA OFF)
set(TANDEM_HAVE_NCCL OFF)
if(TANDEM_CUDA AND NOT TANDEM_RUNTIME_ONLY)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    # One CUDA runtime per process: CMake links cudart_static into targets with CUDA sources
    # by default, beside the shared libcudart that CUDA::cudart brings; two runtimes would
    # keep two sets of state for the same streams.
    if(NOT DEFINED CMAKE_CUDA_RUNTIME_LIBRARY)
      set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flags.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(TANDEM_HAVE_CUDA ON)
    message(STATUS "Tandem: CUDA backend ON (architectures ${CMAKE_CUDA_ARCHITECTURES})")
    # NCCL (the GPU collectives) is optional within the CUDA build: the toolkit here ships it,
    # a machine with PyTorch has it in the nvidia-nccl wheel (lib/libnccl.so.2 and include/, no
    # unversioned link), and NCCL_ROOT names any other install.
    set(_nccl_hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64)
    set(_nccl_include_hints ${CUDAToolkit_INCLUDE_DIRS})
    if(DEFINED ENV{NCCL_ROOT})
      list(APPEND _nccl_hints $ENV{NCCL_ROOT}/lib $ENV{NCCL_ROOT}/lib64)
      list(APPEND _nccl_include_hints $ENV{NCCL_ROOT}/include)
    endif()
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl as m; print(list(m.__path__)[0])"
        OUTPUT_VARIABLE _nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(_nccl_wheel)
        list(APPEND _nccl_hints ${_nccl_wheel}/lib)
        list(APPEND _nccl_include_hints ${_nccl_wheel}/include)
      endif()
    endif()
    find_library(NCCL_LIB NAMES nccl libnccl.so.2 HINTS ${_nccl_hints})
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_include_hints})
    if(NCCL_LIB AND NCCL_INCLUDE_DIR)
      add_library(tandem_nccl INTERFACE)
      target_link_libraries(tandem_nccl INTERFACE ${NCCL_LIB})
      target_include_directories(tandem_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
      set(TANDEM_HAVE_NCCL ON)
      message(STATUS "Tandem: NCCL ${NCCL_LIB}")
    else()
      message(WARNING "Tandem: NCCL not found (set NCCL_ROOT); GPU collectives are left out")
    endif()
  else()
    message(STATUS "Tandem: nvcc not found; building CPU-only")
  endif()
else()
  message(STATUS "Tandem: CUDA backend OFF")
endif()
