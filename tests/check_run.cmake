# Runs a command and checks its exit status, its output and how long it took.
# -DLAUNCH="cmd|arg|..."  -DEXPECT_FAIL=ON|OFF  -DEXPECT="regex"  -DLIMIT=seconds
# Optional: -DEXPECT_STATUS=n (the exact exit status), -DEXPECT_LINES=n (the
# number of non-empty lines of stdout and stderr together).
string(REPLACE "|" ";" command "${LAUNCH}")
string(TIMESTAMP start "%s")
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 60)
string(TIMESTAMP stop "%s")
math(EXPR elapsed "${stop} - ${start}")
message("exit status: ${rc}, elapsed: ${elapsed} s\n--- stdout\n${out}--- stderr\n${err}")
if(EXPECT_FAIL AND "${rc}" STREQUAL "0")
  message(FATAL_ERROR "exited 0; expected a failure")
endif()
if(NOT EXPECT_FAIL AND NOT "${rc}" STREQUAL "0")
  message(FATAL_ERROR "exited ${rc}; expected success")
endif()
if(DEFINED EXPECT_STATUS AND NOT "${rc}" STREQUAL "${EXPECT_STATUS}")
  message(FATAL_ERROR "exited ${rc}; expected status ${EXPECT_STATUS}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "output does not match '${EXPECT}'")
endif()
if(DEFINED EXPECT_LINES)
  string(REPLACE ";" "," text "${out}\n${err}")  # a ';' would split a CMake list item
  string(REGEX MATCHALL "[^\n]+" lines "${text}")
  list(LENGTH lines count)
  if(NOT count EQUAL EXPECT_LINES)
    message(FATAL_ERROR "printed ${count} lines; expected ${EXPECT_LINES}")
  endif()
endif()
if(DEFINED LIMIT AND elapsed GREATER LIMIT)
  message(FATAL_ERROR "took ${elapsed} s (limit ${LIMIT} s)")
endif()
