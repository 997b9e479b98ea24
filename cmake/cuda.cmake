# CUDA, optional (STRATA_WITH_CUDA: ON, OFF or AUTO = on when nvcc is found).
# Sets STRATA_CUDA (ON/OFF) and, when ON, enables the CUDA language and finds
# the toolkit (CUDA::cudart, CUDA::cublas) and cuDNN (strata_cudnn). The CUDA
# code compiles and links without a GPU; tests that need one exit 77 (skipped)
# when there is none (tests/gpu_skip.h).
set(STRATA_CUDA OFF)
# Sanitizer and fuzz builds leave CUDA out: their flags are the host
# compiler's, and nothing of CUDA runs without a GPU anyway.
if(NOT STRATA_WITH_CUDA STREQUAL "OFF" AND NOT STRATA_FUZZ AND NOT STRATA_SANITIZE)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # sm_90 (H100, H200); `native` fails on a machine without a GPU.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 knows no C++20 flag for nvcc: .cu files are C++17, and only
    # kernels/ has them (executor code calling CUDA libraries is plain C++).
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    if(STRATA_CCACHE AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${STRATA_CCACHE})
    endif()
    find_package(CUDAToolkit REQUIRED)
    find_path(STRATA_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(STRATA_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(STRATA_CUDNN_INCLUDE_DIR AND STRATA_CUDNN_LIBRARY)
      add_library(strata_cudnn INTERFACE)
      target_include_directories(strata_cudnn INTERFACE ${STRATA_CUDNN_INCLUDE_DIR})
      target_link_libraries(strata_cudnn INTERFACE ${STRATA_CUDNN_LIBRARY})
      set(STRATA_CUDA ON)
    elseif(STRATA_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "STRATA_WITH_CUDA=ON but cuDNN (cudnn.h, libcudnn) was not found")
    else()
      message(STATUS "strata: nvcc found but not cuDNN: CUDA parts off")
    endif()
  elseif(STRATA_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRATA_WITH_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "strata: CUDA parts ${STRATA_CUDA}")
