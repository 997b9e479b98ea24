# Whether the Python module (python/, `import strata`) is built: Debian's
# pybind11 and Python headers found (pybind11-dev, python3-dev), like ONNX
# and CUDA; never under a sanitizer or the fuzz build (the interpreter is not
# instrumented). Decided before the layers, because the module links them:
# with it, every library is position-independent code (a static library
# linked into a shared object), and -fno-semantic-interposition keeps GCC
# inlining across functions as it does without -fPIC.
set(STRATA_WITH_PYTHON AUTO CACHE STRING "Build the Python module: ON, OFF or AUTO (on when found)")
set_property(CACHE STRATA_WITH_PYTHON PROPERTY STRINGS ON OFF AUTO)
set(STRATA_PYTHON OFF)
if(STRATA_WITH_PYTHON STREQUAL "OFF")
  return()
endif()
if(STRATA_SANITIZE OR STRATA_FUZZ)
  if(STRATA_WITH_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "STRATA_WITH_PYTHON=ON: not with STRATA_SANITIZE or STRATA_FUZZ")
  endif()
  message(STATUS "strata: Python module off (sanitizer or fuzz build)")
  return()
endif()
# Debian's python3 (the one pybind11-dev and python3-dev are for), not the
# first python3 on PATH (a pyenv or venv of another version).
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()
find_package(Python3 3.9 COMPONENTS Interpreter Development.Module)
if(Python3_FOUND)
  set(PYBIND11_FINDPYTHON ON)
  find_package(pybind11 2.6 CONFIG QUIET)
endif()
if(NOT Python3_FOUND OR NOT pybind11_FOUND)
  if(STRATA_WITH_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "STRATA_WITH_PYTHON=ON but pybind11 or the Python headers were not "
                        "found (apt-get install pybind11-dev python3-dev)")
  endif()
  message(STATUS "strata: Python module off (pybind11-dev or python3-dev not found)")
  return()
endif()
message(STATUS "strata: Python module on (${Python3_EXECUTABLE}, pybind11 ${pybind11_VERSION})")
set(STRATA_PYTHON ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-semantic-interposition>)
