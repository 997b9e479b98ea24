# Sanitizer and fuzzer builds (scripts/test --sanitize; docs/testing.md).
#
# STRATA_SANITIZE=address,undefined | thread adds -fsanitize=... to every
# target's compile and link lines, with frame pointers kept for the reports'
# stacks; UBSan aborts on its first report (-fno-sanitize-recover=all), so
# undefined behaviour fails the test that hits it instead of printing a line
# nobody reads. Use RelWithDebInfo: optimised enough to run the suite, with
# line numbers in the reports (compiled -O1 -g1, below).
#
# STRATA_FUZZ=ON (clang only) also instruments every target for libFuzzer's
# coverage (-fsanitize=fuzzer-no-link) and builds the fuzz targets in fuzz/.

set(STRATA_SANITIZE "" CACHE STRING
    "Sanitizers for every target: address,undefined | thread | empty for none")
option(STRATA_FUZZ "Build the libFuzzer targets in fuzz/ (clang only)" OFF)

if(STRATA_SANITIZE)
  string(REPLACE "," ";" _strata_sanitizers "${STRATA_SANITIZE}")
  foreach(_s IN LISTS _strata_sanitizers)
    if(NOT _s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "STRATA_SANITIZE: unknown sanitizer '${_s}' in '${STRATA_SANITIZE}' "
                          "(expected address,undefined or thread)")
    endif()
  endforeach()
  if("thread" IN_LIST _strata_sanitizers AND
     ("address" IN_LIST _strata_sanitizers OR "leak" IN_LIST _strata_sanitizers))
    message(FATAL_ERROR "STRATA_SANITIZE: thread cannot be combined with address or leak")
  endif()
  set(_strata_san_flags -fsanitize=${STRATA_SANITIZE} -fno-omit-frame-pointer)
  if("undefined" IN_LIST _strata_sanitizers)
    list(APPEND _strata_san_flags -fno-sanitize-recover=all)
  endif()
  add_compile_options(${_strata_san_flags})
  # tests/ strips these again under ASan + UBSan (tests/CMakeLists.txt).
  set(STRATA_SANITIZE_COMPILE_FLAGS ${_strata_san_flags})
  # -O1 -g1 instead of RelWithDebInfo's -O2 -g: instrumented code at -O2 -g
  # takes 3.4x the Release build's compile time (45 min of the 2-core VM for
  # build-asan/, more than CI's whole budget allows); -O1 -g1 compiles a
  # typical source 2.2x faster (model's search.cpp, ASan + UBSan: 33.4 s at
  # -O2 -g, 15.5 s at -O1 -g1, 2026-12-02) and still gives the reports file
  # and line (-g1 keeps the line tables). The CPU kernels, where the tests
  # spend their time, stay at -O2 (STRATA_SANITIZE_KERNEL_OPT, executor/nn).
  if(CMAKE_BUILD_TYPE STREQUAL "RelWithDebInfo")
    add_compile_options(-O1 -g1)
    set(STRATA_SANITIZE_KERNEL_OPT -O2)
  endif()
  # Debug information names the build folder "." (sources then read
  # ../model/src/...), so ccache, which otherwise hashes the folder of a -g
  # build, shares these objects between checkouts and CI's clean clones.
  add_compile_options(-fdebug-prefix-map=${CMAKE_BINARY_DIR}=.)
  # Tests drop wall-clock bounds that only hold for optimised builds; under
  # TSan the executor's equivalence tests run fewer worker counts.
  add_compile_definitions(STRATA_SANITIZED=1)
  if("thread" IN_LIST _strata_sanitizers)
    add_compile_definitions(STRATA_SANITIZED_THREAD=1)
  endif()
  add_link_options(-fsanitize=${STRATA_SANITIZE})
  if(NOT CMAKE_BUILD_TYPE STREQUAL "RelWithDebInfo")
    message(WARNING "STRATA_SANITIZE is meant for RelWithDebInfo builds, not '${CMAKE_BUILD_TYPE}'")
  endif()
  message(STATUS "strata: sanitizers ${STRATA_SANITIZE}")
endif()

# Sanitized code runs 2-20x slower (TSan most, ASan's full stack unwinding
# under mpirun too): wall-clock limits of tests (TIMEOUT, check_run.cmake's
# LIMIT) are given through strata_seconds, which scales them in such builds.
set(STRATA_TEST_TIME_SCALE 1)
if(STRATA_SANITIZE)
  set(STRATA_TEST_TIME_SCALE 5)
endif()
# strata_seconds(VAR SECONDS): VAR = SECONDS x STRATA_TEST_TIME_SCALE.
function(strata_seconds var seconds)
  math(EXPR _scaled "${seconds} * ${STRATA_TEST_TIME_SCALE}")
  set(${var} ${_scaled} PARENT_SCOPE)
endfunction()

if(STRATA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "STRATA_FUZZ needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
                        "configure with CXX=clang++-14")
  endif()
  # Coverage for libFuzzer in every library the fuzz targets link; the targets
  # themselves link -fsanitize=fuzzer (strata_add_fuzzer in fuzz/).
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
