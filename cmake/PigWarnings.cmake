# pig_target_warnings(<target>): our warning set on our own code only; third-party headers
# (LLVM, MLIR, Highway) are included as SYSTEM so they never trip -Werror.
function(pig_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${PIG_WERROR}>>:-Werror>)
endfunction()
