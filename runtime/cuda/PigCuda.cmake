# pig_cuda_warnings(<target>): warnings as errors for CUDA sources too (PIG_WERROR), host and
# device side. Included by runtime/cuda, codegen (generated .cu files) and tests/cuda.
# Also sets C++20 for CUDA by hand: CMake 3.25 rejects CUDA_STANDARD 20 with nvcc 13 (callers
# unset CMAKE_CUDA_STANDARD in their directory first).
function(pig_cuda_warnings target)
  set_target_properties(${target} PROPERTIES CUDA_STANDARD_REQUIRED OFF)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${PIG_WERROR}>>:--Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter>)
endfunction()
