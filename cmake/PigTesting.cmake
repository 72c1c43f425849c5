# pig_add_gtest(<name> SOURCES <files...> LIBS <targets...> [LABELS <labels...>])
# One GoogleTest executable in build/bin, registered with ctest as one test per TEST() case.
# Tests run in the sanitizer configuration too, unless labelled "slow" (./pig test uses -LE slow
# there) or built only with MLIR (the sanitizer build has no MLIR).
include(GoogleTest)
function(pig_add_gtest name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  pig_target_warnings(${name})
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()
