# run_expect.cmake - runs a program as CTest would and passes only when it exits 0 AND its
# output (stdout and stderr) matches a regular expression: a crash after the matching line
# fails. Usage:
#   cmake -DPROGRAM=path [-DARGS=a;b] -DEXPECT=regex -P run_expect.cmake
if(NOT DEFINED PROGRAM OR NOT DEFINED EXPECT)
  message(FATAL_ERROR "run_expect: PROGRAM and EXPECT are required")
endif()
execute_process(COMMAND ${PROGRAM} ${ARGS}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT status STREQUAL "0")
  message(FATAL_ERROR "run_expect: ${PROGRAM} exited with ${status} (0 expected)")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "run_expect: the output of ${PROGRAM} does not match '${EXPECT}'")
endif()
message("run_expect: ${PROGRAM} exited 0 and printed a line matching '${EXPECT}'")
