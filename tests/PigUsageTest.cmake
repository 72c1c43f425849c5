# pig_add_usage_tests(<prefix> <tool> NUMBER <flag> <bad value> MISSING <flag> [ARGS <args...>]):
# the three usage errors every CLI is tested for (issue 27), each exit status 2 with a message
# that names the flag: a malformed number, an unknown flag, a flag without its value (last on the
# line). ARGS come first on each line (e.g. --model /nonexistent.gguf, so that a line the parser
# wrongly accepts fails with status 1 instead of loading the model). Needs no model: the parser
# refuses these before anything is loaded.
include(${CMAKE_CURRENT_LIST_DIR}/PigCheckedTest.cmake)

function(pig_add_usage_tests prefix tool)
  cmake_parse_arguments(ARG "" "" "NUMBER;MISSING;ARGS" ${ARGN})
  list(GET ARG_NUMBER 0 number_flag)
  pig_add_checked_test(${prefix}.usage-number STATUS 2 COMMAND ${tool} ${ARG_ARGS} ${ARG_NUMBER})
  set_tests_properties(${prefix}.usage-number PROPERTIES LABELS usage
    PASS_REGULAR_EXPRESSION "${tool}: ${number_flag} expects [^\n]*, got '")
  pig_add_checked_test(${prefix}.usage-unknown STATUS 2
    COMMAND ${tool} ${ARG_ARGS} --no-such-flag 1)
  set_tests_properties(${prefix}.usage-unknown PROPERTIES LABELS usage
    PASS_REGULAR_EXPRESSION "${tool}: unknown argument '--no-such-flag'")
  pig_add_checked_test(${prefix}.usage-missing STATUS 2 COMMAND ${tool} ${ARG_ARGS} ${ARG_MISSING})
  set_tests_properties(${prefix}.usage-missing PROPERTIES LABELS usage
    PASS_REGULAR_EXPRESSION "${tool}: ${ARG_MISSING} needs a value")
endfunction()
