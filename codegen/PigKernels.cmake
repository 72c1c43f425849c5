# Build-time kernel generation from the manifest (configs/kernels.txt, see docs/ADDING.md).
#
# pig_generate_kernels(<manifest>): for every line `K=.. L=.. d=.. f32|bf16|q8 [knob=value ...]`
# (the element type of K/V; q8 is the 8-bit !pig.q8, whose steps take f32 queries; an element
# type the runtime lacks fails at configure time, naming the line and the types that exist)
#   1. pig-opt runs the pipeline on the generic step (decode_step.mlir.in for that dtype):
#      --pig-decompose --pig-specialize="manifest=<manifest> k= l= d= dtype=" --pig-partition
#      --pig-fuse --pig-schedule (target cpu; and target cpu+gpu where nvcc exists); the line's
#      knobs are pig-schedule's schedule= (explicit), else PIG_KERNEL_RECORDS' tuning records
#      for this machine, else the default heuristic decide the schedule;
#   2. pig-translate --emit=cpu writes generated/pig_lsh_<name>.cpp (one Highway TU per line;
#      <name> is the key, plus the line's knobs when it has any: k10_l150_d64_bf16_gqaunion_block32);
#   3. pig-translate --emit=cpu-registry writes pig_register_generated_kernels() for all lines;
#   4. with CUDA, pig-translate --emit=cuda writes one .cu for all lines but the q8 ones (there
#      are no CUDA kernels for q8: its lines get their CPU TU only).
# Libraries: pig_generated_kernels (links pig_kernels) and pig_generated_cuda_kernels (links
# pig_cuda). Every step depends on the tools and the manifest, so editing either regenerates.
# Element types of K/V the runtime has kernels for: the names of pig::spec::kDTypes, read from
# spec/include/pig/spec/kv_type.h (one `{DType::x, "x"},` entry per line), so that this list
# cannot drift from the C++ one (pig-specialize then reads every line with the same table). And
# those of them with CUDA kernels.
get_filename_component(PIG_SPEC_KV_TYPE_H ${PIG_CODEGEN_DIR}/../spec/include/pig/spec/kv_type.h
                       ABSOLUTE)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PIG_SPEC_KV_TYPE_H})
file(STRINGS ${PIG_SPEC_KV_TYPE_H} PIG_KERNEL_DTYPES
     REGEX "^ *{DType::[a-z0-9_]+, \"[a-z0-9_]+\"},")
list(TRANSFORM PIG_KERNEL_DTYPES REPLACE "^ *{DType::[a-z0-9_]+, \"([a-z0-9_]+)\"},.*$" "\\1")
if(NOT PIG_KERNEL_DTYPES)
  message(FATAL_ERROR "${PIG_SPEC_KV_TYPE_H}: no element types found (kDTypes entries)")
endif()
set(PIG_KERNEL_CUDA_DTYPES f32 bf16)
set(PIG_KERNEL_RECORDS "" CACHE FILEPATH
    "Tuning records (JSON, docs/SCHEDULES.md) pig-schedule reads for manifest lines without knobs")

function(pig_generate_kernels manifest)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${manifest})
  set(records_option "--pig-schedule")
  set(records_depends "")
  if(PIG_KERNEL_RECORDS)
    set(records_option "--pig-schedule=record=${PIG_KERNEL_RECORDS}")
    set(records_depends ${PIG_KERNEL_RECORDS})
  endif()
  set(gen ${CMAKE_CURRENT_BINARY_DIR}/generated)
  file(MAKE_DIRECTORY ${gen})
  foreach(dtype IN LISTS PIG_KERNEL_DTYPES)
    # PIG_DTYPE: the keys' and values' element type; PIG_QUERY_DTYPE: the queries' (f32 for
    # the 8-bit KV cache).
    if(dtype STREQUAL "q8")
      set(PIG_DTYPE "!pig.q8")
      set(PIG_QUERY_DTYPE f32)
    else()
      set(PIG_DTYPE ${dtype})
      set(PIG_QUERY_DTYPE ${dtype})
    endif()
    configure_file(${PIG_CODEGEN_DIR}/decode_step.mlir.in ${gen}/decode_step_${dtype}.mlir @ONLY)
  endforeach()
  string(REPLACE ";" ", " dtype_names "${PIG_KERNEL_DTYPES}")
  string(REPLACE ";" "|" dtype_regex "${PIG_KERNEL_DTYPES}")

  file(STRINGS ${manifest} lines)
  set(cpu_sources)
  set(cpu_irs)
  set(gpu_irs)
  set(number 0)
  set(keys)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    string(REGEX REPLACE "#.*" "" line "${line}")
    string(STRIP "${line}" line)
    if(line STREQUAL "")
      continue()
    endif()
    # The knobs' names and values are checked by pig-specialize (which reads the manifest with
    # pig::spec::parse_manifest_line, and names the line) against spec/include/pig/spec/
    # schedule.h; here only their form.
    # An element type the runtime lacks (q4, f16): say which exist.
    if(line MATCHES "^K=[0-9]+[ \t]+L=[0-9]+[ \t]+d=[0-9]+[ \t]+([A-Za-z0-9_!.]+)([ \t]|$)")
      set(word ${CMAKE_MATCH_1})
      if(NOT word IN_LIST PIG_KERNEL_DTYPES)
        message(FATAL_ERROR "${manifest}:${number}: '${line}': element type '${word}' has no "
                            "kernels (element types: ${dtype_names})")
      endif()
    endif()
    if(NOT line MATCHES "^K=([0-9]+)[ \t]+L=([0-9]+)[ \t]+d=([0-9]+)[ \t]+(${dtype_regex})(([ \t]+[a-z_]+=[a-z0-9_]+)*)$")
      message(FATAL_ERROR "${manifest}:${number}: cannot read '${line}' "
                          "(expected e.g. 'K=10 L=150 d=128 bf16', optionally followed by "
                          "schedule knobs such as 'gqa=union block=32')")
    endif()
    set(k ${CMAKE_MATCH_1})
    set(l ${CMAKE_MATCH_2})
    set(d ${CMAKE_MATCH_3})
    set(dtype ${CMAKE_MATCH_4})
    string(STRIP "${CMAKE_MATCH_5}" knobs)
    string(REGEX REPLACE "[ \t]+" "," knobs "${knobs}")
    set(key k${k}_l${l}_d${d}_${dtype})
    if(knobs STREQUAL "")
      set(schedule "${records_option}")
    else()
      # gqa=union,block=32 -> k10_l150_d64_bf16_gqaunion_block32
      string(REPLACE "=" "" suffix "${knobs}")
      string(REPLACE "," "_" suffix "${suffix}")
      set(key ${key}_${suffix})
      set(schedule "--pig-schedule=schedule=${knobs}")
    endif()
    if(key IN_LIST keys)
      message(FATAL_ERROR "${manifest}:${number}: '${line}' is listed twice")
    endif()
    list(APPEND keys ${key})
    set(step ${gen}/decode_step_${dtype}.mlir)
    set(specialize "--pig-specialize=manifest=${manifest} k=${k} l=${l} d=${d} dtype=${dtype}")

    add_custom_command(
      OUTPUT ${gen}/${key}.cpu.mlir
      COMMAND pig-opt ${step} --pig-decompose ${specialize} --pig-partition=target=cpu
              --pig-fuse ${schedule} --mlir-print-op-on-diagnostic=false -o ${gen}/${key}.cpu.mlir
      DEPENDS pig-opt ${manifest} ${step} ${records_depends}
      COMMENT "pig-opt: ${key} (cpu)" VERBATIM)
    add_custom_command(
      OUTPUT ${gen}/pig_lsh_${key}.cpp
      COMMAND pig-translate --emit=cpu ${gen}/${key}.cpu.mlir
              --hwy-self-include=pig_lsh_${key}.cpp -o ${gen}/pig_lsh_${key}.cpp
      DEPENDS pig-translate ${gen}/${key}.cpu.mlir
      COMMENT "pig-translate: pig_lsh_${key}.cpp" VERBATIM)
    list(APPEND cpu_irs ${gen}/${key}.cpu.mlir)
    list(APPEND cpu_sources ${gen}/pig_lsh_${key}.cpp)

    if(PIG_HAVE_CUDA AND dtype IN_LIST PIG_KERNEL_CUDA_DTYPES)
      add_custom_command(
        OUTPUT ${gen}/${key}.gpu.mlir
        COMMAND pig-opt ${step} --pig-decompose ${specialize} --pig-partition=target=cpu+gpu
                --pig-fuse ${schedule} --mlir-print-op-on-diagnostic=false
                -o ${gen}/${key}.gpu.mlir
        DEPENDS pig-opt ${manifest} ${step} ${records_depends}
        COMMENT "pig-opt: ${key} (cpu+gpu)" VERBATIM)
      list(APPEND gpu_irs ${gen}/${key}.gpu.mlir)
    endif()
  endforeach()
  if(NOT cpu_irs)
    message(FATAL_ERROR "${manifest} lists no kernel configuration")
  endif()

  add_custom_command(
    OUTPUT ${gen}/pig_register_generated_kernels.cpp
    COMMAND pig-translate --emit=cpu-registry ${cpu_irs}
            -o ${gen}/pig_register_generated_kernels.cpp
    DEPENDS pig-translate ${cpu_irs}
    COMMENT "pig-translate: pig_register_generated_kernels.cpp" VERBATIM)
  add_library(pig_generated_kernels STATIC ${cpu_sources}
                                           ${gen}/pig_register_generated_kernels.cpp)
  # The library's interface, pig/runtime/generated_kernels.h, is the runtime's (pig_kernels).
  # HWY_TARGET_INCLUDE of each generated TU names the file itself.
  target_include_directories(pig_generated_kernels PRIVATE ${gen})
  target_link_libraries(pig_generated_kernels PUBLIC pig_kernels)
  pig_target_warnings(pig_generated_kernels)

  if(PIG_HAVE_CUDA AND gpu_irs) # a manifest of q8 lines only has no CUDA instantiation
    add_custom_command(
      OUTPUT ${gen}/pig_generated_cuda_kernels.cu
      COMMAND pig-translate --emit=cuda ${gpu_irs} -o ${gen}/pig_generated_cuda_kernels.cu
      DEPENDS pig-translate ${gpu_irs}
      COMMENT "pig-translate: pig_generated_cuda_kernels.cu" VERBATIM)
    add_library(pig_generated_cuda_kernels STATIC ${gen}/pig_generated_cuda_kernels.cu)
    target_link_libraries(pig_generated_cuda_kernels PUBLIC pig_cuda)
    pig_cuda_warnings(pig_generated_cuda_kernels)
  endif()
endfunction()
