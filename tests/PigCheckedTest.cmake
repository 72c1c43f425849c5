# pig_add_checked_test(<name> [MODEL] [STATUS <n>] COMMAND <command> [args...]): a ctest test of
# a tool or benchmark run through tests/run_checked.sh, which fails it when the exit status is not
# <n> (default 0) even where a PASS_REGULAR_EXPRESSION matched. With MODEL the test needs the
# model ${PIG_MODEL}: it is registered whatever the model's state at configure time, and at run
# time skips with a message when the model is missing (fails instead when CI=true). <command>
# may be a target name; no argument may contain a ';' (CMake would split it). Set further
# properties (LABELS, TIMEOUT, PASS_REGULAR_EXPRESSION) with set_tests_properties as usual; leave
# FAIL_REGULAR_EXPRESSION and SKIP_RETURN_CODE as they are.
set(PIG_RUN_CHECKED ${CMAKE_CURRENT_LIST_DIR}/run_checked.sh)

function(pig_add_checked_test name)
  cmake_parse_arguments(ARG "MODEL" "STATUS" "COMMAND" ${ARGN})
  list(POP_FRONT ARG_COMMAND command)
  if(TARGET ${command})
    set(command $<TARGET_FILE:${command}>)
  endif()
  set(wrapper sh ${PIG_RUN_CHECKED})
  if(ARG_MODEL)
    list(APPEND wrapper --model ${PIG_MODEL})
  endif()
  if(DEFINED ARG_STATUS)
    list(APPEND wrapper --status ${ARG_STATUS})
  endif()
  add_test(NAME ${name} COMMAND ${wrapper} ${command} ${ARG_COMMAND})
  set_tests_properties(${name} PROPERTIES FAIL_REGULAR_EXPRESSION "pig-test: FAIL")
  if(ARG_MODEL)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()
