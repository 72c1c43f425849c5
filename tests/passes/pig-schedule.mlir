// pig-schedule: an explicit schedule > pig-tune's speed records for the kernel key on this
// machine's hardware > the default heuristic; a remark says which. Records: Inputs/schedule-*.jsonl
// (pig-tune's format, spec/include/pig/spec/tuning_record.h); machines spelled
// cpu|target|cores|threads|l3_bytes, compared on cpu, cores and L3 only.
// RUN: pig-opt %pig_examples/decode_step.mlir --pig-decompose --pig-specialize="k=10 l=150" --pig-partition --pig-fuse -o %t.mlir

// Records for K=10 L=150 d=128 bf16 on this machine: the fastest at the largest context (line 2;
// line 3 is faster but at 4096 tokens; one layer's time, a failed measurement, a quality
// record, the "non-attention" and "point ..." rows do not compete).
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.jsonl machine='Test CPU A|AVX3_DL|2|2|1048576'" 2>&1 | FileCheck %s --check-prefix=RECORD --implicit-check-not=warning
// RECORD: remark: pig-schedule: @decode_step K=10 L=150 d=128 bf16: gqa=union block=32 prefetch=16 dense_prefetch=64 tables_ahead=8 parts=0 from the record at line 2 of '{{.*}}schedule-records.jsonl' (the fastest of 2 at context 16384, 2 threads, on 'Test CPU A, AVX3_DL, 2 cores, 2 threads, L3 1 MiB')
// RECORD: {{^}}module {
// RECORD-NEXT: func.func @decode_step
// RECORD-SAME: pig.schedule = #pig.schedule<gqa = union, block = 32, prefetch = 16, dense_prefetch = 64, tables_ahead = 8, parts = 0>

// The build knows neither the target nor the threads: a record of the same hardware applies
// whatever its target and threads were.
// RUN: pig-opt %pig_examples/decode_step.mlir --pig-decompose --pig-specialize="k=8 l=75" --pig-partition --pig-fuse --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.jsonl machine='Test CPU B||8|0|33554432'" 2>&1 | FileCheck %s --check-prefix=HARDWARE
// HARDWARE: remark: pig-schedule: @decode_step K=8 L=75 d=128 bf16: gqa=per_head block=64 prefetch=8 dense_prefetch=64 tables_ahead=4 parts=2 from the record at line 4 of
// HARDWARE: pig.schedule = #pig.schedule<gqa = per_head, block = 64, prefetch = 8, dense_prefetch = 64, tables_ahead = 4, parts = 2>

// Records for the key, but for other hardware: a warning, then the default heuristic. The
// default machine is this one's (spec::DetectMachine).
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.jsonl machine='Test CPU C|AVX3_DL|2|2|1048576'" 2>&1 | FileCheck %s --check-prefix=OTHER
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.jsonl" 2>&1 | FileCheck %s --check-prefix=HERE
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.jsonl machine='Test CPU A|AVX3_DL|4|2|1048576'" 2>&1 | FileCheck %s --check-prefix=CORES
// OTHER: warning: pig-schedule: tuning records '{{.*}}schedule-records.jsonl' hold K=10 L=150 d=128 bf16 only for machine 'Test CPU A, 2 cores, L3 1 MiB', not for this machine 'Test CPU C, 2 cores, L3 1 MiB': using the default heuristic
// OTHER: remark: pig-schedule: @decode_step K=10 L=150 d=128 bf16: gqa=per_head block=64 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0 from the default heuristic (d=128, group of 2)
// OTHER: pig.schedule = #pig.schedule<gqa = per_head, block = 64, prefetch = 8, dense_prefetch = 64, tables_ahead = 8, parts = 0>
// HERE: warning: pig-schedule: tuning records '{{.*}}' hold K=10 L=150 d=128 bf16 only for machine 'Test CPU A, 2 cores, L3 1 MiB', not for this machine '{{.+}}': using the default heuristic
// HERE: remark: pig-schedule: {{.*}} from the default heuristic (d=128, group of 2)
// CORES: warning: {{.*}} not for this machine 'Test CPU A, 4 cores, L3 1 MiB': using the default heuristic

// No record for the key at all: the default heuristic, without a warning.
// RUN: pig-opt %pig_examples/decode_step.mlir --pig-decompose --pig-specialize="k=9 l=120" --pig-partition --pig-fuse --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.jsonl machine='Test CPU A|AVX3_DL|2|2|1048576'" 2>&1 | FileCheck %s --check-prefix=NOKEY --implicit-check-not=warning
// NOKEY: remark: pig-schedule: @decode_step K=9 L=120 d=128 bf16: gqa=per_head block=64 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0 from the default heuristic (d=128, group of 2)

// The explicit schedule wins over a matching record; knobs with commas or spaces.
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="schedule=gqa=union,block=16,parts=3 record=%S/Inputs/schedule-records.jsonl machine='Test CPU A|AVX3_DL|2|2|1048576'" 2>&1 | FileCheck %s --check-prefix=EXPLICIT
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="schedule='parts=3 block=16 gqa=union'" 2>&1 | FileCheck %s --check-prefix=EXPLICIT
// EXPLICIT: remark: pig-schedule: @decode_step K=10 L=150 d=128 bf16: gqa=union block=16 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=3 from the schedule option
// EXPLICIT: pig.schedule = #pig.schedule<gqa = union, block = 16, prefetch = 8, dense_prefetch = 64, tables_ahead = 8, parts = 3>

// No option: the default heuristic; a GQA group of 1 in the f32 d=64 step of this file. A
// schedule already in the IR is replaced.
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule 2>&1 | FileCheck %s --check-prefix=DEFAULT
// RUN: pig-opt %s --pig-decompose --pig-specialize="k=8 l=75 d=64" --pig-fuse --mlir-print-op-on-diagnostic=false --pig-schedule 2>&1 | FileCheck %s --check-prefix=GROUP1
// DEFAULT: remark: pig-schedule: @decode_step K=10 L=150 d=128 bf16: gqa=per_head block=64 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0 from the default heuristic (d=128, group of 2)
// DEFAULT: pig.schedule = #pig.schedule<gqa = per_head, block = 64, prefetch = 8, dense_prefetch = 64, tables_ahead = 8, parts = 0>
// GROUP1: remark: pig-schedule: @step K=8 L=75 d=64 f32: {{.*}} from the default heuristic (d=64, group of 1)
// GROUP1: {{^}}module {
// GROUP1-NEXT: func.func @step
// GROUP1-SAME: pig.schedule = #pig.schedule<gqa = per_head, block = 64,
// GROUP1: func.func @no_pig(
// GROUP1-NOT: pig.schedule
// GROUP1: return

// Lines that are not records (pig-tune's loader skips the same ones): a warning naming the line,
// and the rest of the file is used: a truncated last line (an interrupted append), a newer
// schema, a mistyped field.
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-malformed.jsonl machine='Test CPU A|AVX3_DL|2|2|1048576'" 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-newer-schema.jsonl machine='Test CPU A|AVX3_DL|2|2|1048576'" 2>&1 | FileCheck %s --check-prefix=SCHEMA
// MALFORMED: warning: pig-schedule: tuning records '{{.*}}schedule-malformed.jsonl' line 2 is not a record (not JSON: [json.exception.parse_error.101] parse error at line 1, column {{[0-9]+}}: {{.*}}): skipped
// MALFORMED: remark: pig-schedule: @decode_step K=10 L=150 d=128 bf16: gqa=per_head block=64 {{.*}} from the record at line 1 of
// SCHEMA: warning: pig-schedule: tuning records '{{.*}}' line 1 is not a record (schema 2 is not one this build reads (1..1)): skipped
// SCHEMA: warning: pig-schedule: tuning records '{{.*}}' line 2 is not a record (time: field 'median_s' must be a number, not string): skipped
// SCHEMA: remark: {{.*}} from the default heuristic

// Errors: a missing file, an illegal or unknown knob (in a record or the option), a malformed
// machine=, a function not specialised.
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/no-such-file.jsonl" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-illegal.jsonl" 2>&1 | FileCheck %s --check-prefix=ILLEGAL
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-unknown-knob.jsonl" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.jsonl machine='Test CPU A; family 6 model 207; x86_64'" 2>&1 | FileCheck %s --check-prefix=MACHINE
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="schedule=block=48" 2>&1 | FileCheck %s --check-prefix=OPTION
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="schedule=gqa=shared" 2>&1 | FileCheck %s --check-prefix=OPTIONGQA
// RUN: not pig-opt %s --mlir-print-op-on-diagnostic=false --pig-schedule 2>&1 | FileCheck %s --check-prefix=NOKERNEL
// MISSING: error: pig-schedule: cannot read tuning records '{{.*}}no-such-file.jsonl': No such file or directory
// ILLEGAL: error: pig-schedule: tuning records '{{.*}}schedule-illegal.jsonl' line 1 (K=10 L=150 d=128 bf16): schedule knob 'block' = 48 is illegal (rows per softmax block: 16, 32, 64 or 128)
// UNKNOWN: error: pig-schedule: tuning records '{{.*}}' line 1 (K=10 L=150 d=128 bf16): unknown schedule knob 'colour' (gqa, block, prefetch, dense_prefetch, tables_ahead, parts)
// MACHINE: error: pig-schedule: machine=: machine 'Test CPU A; family 6 model 207; x86_64': 1 fields (expected cpu|target|cores|threads|l3_bytes)
// OPTION: error: pig-schedule: schedule="block=48": schedule knob 'block' = 48 is illegal (rows per softmax block: 16, 32, 64 or 128)
// OPTIONGQA: error: pig-schedule: schedule="gqa=shared": schedule knob 'gqa' expects per_head or union, got 'shared'
// NOKERNEL: error: pig-schedule: function @step has no pig.kernel: run --pig-specialize before --pig-schedule (a schedule is chosen per kernel key)

// A generic f32 step with one query head per kv-head.
func.func @step(%q: tensor<1x?xf32>, %k: tensor<1x?x?xf32>, %v: tensor<1x?x?xf32>)
    -> (tensor<1x?xf32>, tensor<1xf32>) {
  %o, %lse = pig.sampled_attention %q, %k, %v {
      lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>,
      static_tokens = #pig.static<sink = 4, local = 64>}
      : (tensor<1x?xf32>, tensor<1x?x?xf32>, tensor<1x?x?xf32>) -> (tensor<1x?xf32>, tensor<1xf32>)
  return %o, %lse : tensor<1x?xf32>, tensor<1xf32>
}

// No pig op: not scheduled.
func.func @no_pig(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
