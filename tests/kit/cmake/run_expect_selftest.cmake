# run_expect_selftest.cmake - run_expect.cmake itself can fail: a program that prints the
# expected line and then exits non-zero (or dies by a signal) fails it, as does one that
# exits 0 without the line; one that prints it and exits 0 passes. Each for the reason
# the runner gives.
#   cmake -DRUNNER=run_expect.cmake -P run_expect_selftest.cmake
set(line "w = 3.000, b = -1.000")
set(cases
  "pass|echo '${line}'|exited 0 and printed"
  "fail|echo '${line}' && exit 3|exited with 3"
  "fail|echo '${line}' && kill -SEGV $$|exited with [A-Za-z]"
  "fail|echo 'w = 2.000'|does not match")
set(failures 0)
foreach(c ${cases})
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 want)
  list(GET parts 1 script)
  list(GET parts 2 why)
  execute_process(COMMAND ${CMAKE_COMMAND} -DPROGRAM=sh "-DARGS=-c;${script}" "-DEXPECT=w = 3\\.000, b = -1\\.000"
                          -P ${RUNNER}
                  RESULT_VARIABLE status OUTPUT_VARIABLE err ERROR_VARIABLE err)
  if(status STREQUAL "0")
    set(got pass)
  else()
    set(got fail)
  endif()
  if(NOT got STREQUAL want OR NOT err MATCHES "${why}")
    math(EXPR failures "${failures} + 1")
    message("FAIL: `${script}` should ${want} the runner, it did ${got} (reason expected: '${why}'): ${err}")
  else()
    message("ok: `${script}` -> ${got}")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "run_expect_selftest: ${failures} failed")
endif()
