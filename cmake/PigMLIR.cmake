# MLIR 19 from Debian (see shared/docs/TOOLCHAIN.md for why each line is here).
find_package(MLIR REQUIRED CONFIG HINTS /usr/lib/llvm-19/lib/cmake/mlir)
if(NOT LLVM_VERSION_MAJOR EQUAL 19)
  message(FATAL_ERROR "pig needs MLIR 19; found ${LLVM_PACKAGE_VERSION} at ${MLIR_DIR}")
endif()
message(STATUS "pig: MLIR from ${MLIR_DIR}")
# Without this every tablegen step reruns on every build (CMake >= 3.20 + MLIR's AddMLIR).
cmake_policy(SET CMP0116 OLD)

list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
set(LLVM_RUNTIME_OUTPUT_INTDIR ${CMAKE_BINARY_DIR}/bin)
set(LLVM_LIBRARY_OUTPUT_INTDIR ${CMAKE_BINARY_DIR}/lib)
set(MLIR_BINARY_DIR ${CMAKE_BINARY_DIR})
include(TableGen)
include(AddLLVM)
include(AddMLIR)
# HandleLLVMOptions is deliberately not included: it would impose LLVM's global flags on the
# MLIR-free layers. AddLLVM already applies -fno-exceptions to the targets it creates.

include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
separate_arguments(LLVM_DEFINITIONS_LIST NATIVE_COMMAND ${LLVM_DEFINITIONS})
add_definitions(${LLVM_DEFINITIONS_LIST})

find_program(PIG_FILECHECK FileCheck HINTS ${LLVM_TOOLS_BINARY_DIR} /usr/lib/llvm-19/bin REQUIRED)
find_program(PIG_NOT not HINTS ${LLVM_TOOLS_BINARY_DIR} /usr/lib/llvm-19/bin REQUIRED)
