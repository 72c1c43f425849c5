# Highway targets of the translation units only tests and benchmarks use (kernel sets with other
# schedules or specialisations than the runtime's): compiling each for all five targets cost a
# quarter of a clean build (26 of 55 CPU-minutes on 2 cores), while a test binary only runs on the
# machine that built it. With PIG_TEST_HWY_TARGETS=native (the default) such a file compiles for
# this machine's best target and the scalar fallback; =all compiles every target, as the runtime's
# own kernels (pig_kernels, pig_generated_kernels) always do. The kernel tests run these sets only
# on the target they were compiled for (tests/kernels/lsh_test_util.cpp).
set(PIG_TEST_HWY_TARGETS "native" CACHE STRING
    "Highway targets of test-only kernel sets: native (this machine's best + scalar) or all")
set_property(CACHE PIG_TEST_HWY_TARGETS PROPERTY STRINGS native all)

set(PIG_NATIVE_HWY_TARGET "")
if(PIG_TEST_HWY_TARGETS STREQUAL "native" AND NOT CMAKE_CROSSCOMPILING)
  try_run(pig_probe_run pig_probe_compiled ${CMAKE_BINARY_DIR}/pig-hwy-probe
          SOURCES ${CMAKE_CURRENT_LIST_DIR}/hwy_best_target.cpp
          COMPILE_DEFINITIONS -DHWY_WANT_AVX3_DL "-DHWY_DISABLED_TARGETS=${PIG_HWY_DISABLED_TARGETS}"
          LINK_LIBRARIES hwy::hwy
          CXX_STANDARD 20
          COMPILE_OUTPUT_VARIABLE pig_probe_log
          RUN_OUTPUT_VARIABLE pig_probe_out)
  if(pig_probe_compiled AND pig_probe_run EQUAL 0 AND pig_probe_out MATCHES "^HWY_[A-Z0-9_]+$")
    set(PIG_NATIVE_HWY_TARGET ${pig_probe_out})
    message(STATUS "pig: test-only kernel sets compile for ${PIG_NATIVE_HWY_TARGET} and HWY_SCALAR "
                   "(PIG_TEST_HWY_TARGETS=all: every target)")
  else()
    message(STATUS "pig: the Highway target probe failed; test-only kernel sets compile for every "
                   "target")
  endif()
endif()

# pig_native_targets_only(SOURCES...): those Highway TUs (foreach_target) compile for the probed
# target and HWY_SCALAR only. Each such file includes tests/native_targets.h first.
function(pig_native_targets_only)
  if(PIG_NATIVE_HWY_TARGET)
    set_property(SOURCE ${ARGN} APPEND PROPERTY COMPILE_DEFINITIONS
                 PIG_HWY_ONLY_TARGET=${PIG_NATIVE_HWY_TARGET})
  endif()
endfunction()
