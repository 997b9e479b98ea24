# Runs comm_mpi_fault under mpirun and checks that the job ends non-zero, within
# 10 s, with the failing rank's error in its output.
# -DLAUNCH="<mpiexec>|-n|3|...|<program>" (the command line, '|'-separated)
string(REPLACE "|" ";" command "${LAUNCH}")
string(TIMESTAMP start "%s")
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 30)
string(TIMESTAMP stop "%s")
math(EXPR elapsed "${stop} - ${start}")
message("exit status: ${rc}, elapsed: ${elapsed} s\n--- stdout\n${out}--- stderr\n${err}")
if("${rc}" STREQUAL "0")
  message(FATAL_ERROR "the job exited 0; a failing rank must end it non-zero")
endif()
if(NOT "${out}${err}" MATCHES "worker 1: injected failure on rank 1")
  message(FATAL_ERROR "the failing rank's error is not in the output")
endif()
if(elapsed GREATER 10)
  message(FATAL_ERROR "the job took ${elapsed} s to end (limit 10 s)")
endif()
