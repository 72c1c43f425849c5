# pig_add_lit_suite(<ctest name>): runs the lit tests of the calling directory (tests/dialect,
# tests/passes) with pig-opt from build/bin and FileCheck / not from LLVM 19.
set(PIG_LIT_DIR ${CMAKE_CURRENT_LIST_DIR})

if(NOT PIG_LIT_COMMAND)
  set(_pig_lit_python "")
  if(PIG_PYTHON AND EXISTS "${PIG_PYTHON}")
    # The venv's lit (pip's lit has no __main__, so run its entry point).
    execute_process(COMMAND "${PIG_PYTHON}" -c "import lit.main" RESULT_VARIABLE _pig_lit_rc
                    OUTPUT_QUIET ERROR_QUIET)
    if(_pig_lit_rc EQUAL 0)
      # No ';' in the code: CMake would split the argument there (and `python -c "import ..."`
      # alone exits 0, so every lit suite passed without running a test).
      set(PIG_LIT_COMMAND "${PIG_PYTHON}" -c
          "__import__('sys').exit(__import__('lit.main').main.main())")
    endif()
  endif()
  if(NOT PIG_LIT_COMMAND)
    # Debian's copy of lit (llvm-19-dev), run by whatever python3 is there.
    find_package(Python3 REQUIRED COMPONENTS Interpreter)
    find_file(PIG_DEBIAN_LIT lit.py HINTS /usr/lib/llvm-19/build/utils/lit REQUIRED)
    set(PIG_LIT_COMMAND ${Python3_EXECUTABLE} ${PIG_DEBIAN_LIT})
  endif()
  message(STATUS "pig: lit is '${PIG_LIT_COMMAND}'")
endif()

function(pig_add_lit_suite name)
  set(PIG_TOOLS_DIR ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  get_filename_component(PIG_LLVM_TOOLS_DIR ${PIG_FILECHECK} DIRECTORY)
  get_filename_component(PIG_EXAMPLES_DIR ${PIG_LIT_DIR}/../../examples ABSOLUTE)
  set(PIG_LIT_CFG ${PIG_LIT_DIR}/lit.cfg.py)
  configure_file(${PIG_LIT_DIR}/lit.site.cfg.py.in ${CMAKE_CURRENT_BINARY_DIR}/lit.site.cfg.py
                 @ONLY)
  add_test(NAME ${name} COMMAND ${PIG_LIT_COMMAND} -sv ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(${name} PROPERTIES LABELS "mlir;lit")
endfunction()

# Static MLIR links are several times faster with lld.
function(pig_use_lld target)
  find_program(PIG_LLD ld.lld)
  if(PIG_LLD)
    target_link_options(${target} PRIVATE -fuse-ld=lld)
  endif()
endfunction()
