// pig-schedule: an explicit schedule > a tuning record for the kernel key and machine > the
// default heuristic; a remark says which. Records: Inputs/schedule-*.json (docs/SCHEDULES.md).
// RUN: pig-opt %pig_examples/decode_step.mlir --pig-decompose --pig-specialize="k=10 l=150" --pig-partition --pig-fuse -o %t.mlir

// A record for K=10 L=150 d=128 bf16 on this machine.
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.json machine='Test CPU A; family 6 model 207; x86_64'" 2>&1 | FileCheck %s --check-prefix=RECORD
// RECORD: remark: pig-schedule: @decode_step K=10 L=150 d=128 bf16: gqa=union block=32 prefetch=16 dense_prefetch=64 tables_ahead=8 parts=0 from record 1 of '{{.*}}schedule-records.json' (machine 'Test CPU A; family 6 model 207; x86_64')
// RECORD: {{^}}module {
// RECORD-NEXT: func.func @decode_step
// RECORD-SAME: pig.schedule = #pig.schedule<gqa = union, block = 32, prefetch = 16, dense_prefetch = 64, tables_ahead = 8, parts = 0>

// A record in the string form, whitespace in the key collapsed.
// RUN: pig-opt %pig_examples/decode_step.mlir --pig-decompose --pig-specialize="k=8 l=75" --pig-partition --pig-fuse --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.json machine='Test CPU B;   x86_64'" 2>&1 | FileCheck %s --check-prefix=STRING
// STRING: remark: pig-schedule: @decode_step K=8 L=75 d=128 bf16: gqa=per_head block=64 prefetch=8 dense_prefetch=64 tables_ahead=4 parts=2 from record 2 of
// STRING: pig.schedule = #pig.schedule<gqa = per_head, block = 64, prefetch = 8, dense_prefetch = 64, tables_ahead = 4, parts = 2>

// Records for the key, but for other machines: a warning, then the default heuristic. The
// default machine is this one's fingerprint (model name; family, model; architecture).
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.json machine='Test CPU C'" 2>&1 | FileCheck %s --check-prefix=OTHER
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.json" 2>&1 | FileCheck %s --check-prefix=HERE
// OTHER: warning: pig-schedule: tuning records '{{.*}}schedule-records.json' hold K=10 L=150 d=128 bf16 only for machine 'Test CPU A; family 6 model 207; x86_64', not for this machine 'Test CPU C': using the default heuristic
// OTHER: remark: pig-schedule: @decode_step K=10 L=150 d=128 bf16: gqa=per_head block=64 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0 from the default heuristic (d=128, group of 2)
// OTHER: pig.schedule = #pig.schedule<gqa = per_head, block = 64, prefetch = 8, dense_prefetch = 64, tables_ahead = 8, parts = 0>
// HERE: warning: pig-schedule: tuning records '{{.*}}' hold K=10 L=150 d=128 bf16 only for machine 'Test CPU A; family 6 model 207; x86_64', not for this machine '{{.+}}': using the default heuristic
// HERE: remark: pig-schedule: {{.*}} from the default heuristic (d=128, group of 2)

// No record for the key at all: the default heuristic, without a warning.
// RUN: pig-opt %pig_examples/decode_step.mlir --pig-decompose --pig-specialize="k=9 l=120" --pig-partition --pig-fuse --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-records.json machine='Test CPU A; family 6 model 207; x86_64'" 2>&1 | FileCheck %s --check-prefix=NOKEY --implicit-check-not=warning
// NOKEY: remark: pig-schedule: @decode_step K=9 L=120 d=128 bf16: gqa=per_head block=64 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0 from the default heuristic (d=128, group of 2)

// The explicit schedule wins over a matching record; knobs with commas or spaces.
// RUN: pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="schedule=gqa=union,block=16,parts=3 record=%S/Inputs/schedule-records.json machine='Test CPU A; family 6 model 207; x86_64'" 2>&1 | FileCheck %s --check-prefix=EXPLICIT
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

// Errors: a missing, malformed or ill-formed record file, an illegal or unknown knob (in a
// record or the option), two records for one key and machine, a function not specialised.
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/no-such-file.json" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-malformed.json" 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-illegal.json" 2>&1 | FileCheck %s --check-prefix=ILLEGAL
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-unknown-knob.json" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-no-version.json" 2>&1 | FileCheck %s --check-prefix=VERSION
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-bad-kernel.json" 2>&1 | FileCheck %s --check-prefix=BADKEY
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="record=%S/Inputs/schedule-twice.json machine='Test CPU A'" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="schedule=block=48" 2>&1 | FileCheck %s --check-prefix=OPTION
// RUN: not pig-opt %t.mlir --mlir-print-op-on-diagnostic=false --pig-schedule="schedule=gqa=shared" 2>&1 | FileCheck %s --check-prefix=OPTIONGQA
// RUN: not pig-opt %s --mlir-print-op-on-diagnostic=false --pig-schedule 2>&1 | FileCheck %s --check-prefix=NOKERNEL
// MISSING: error: pig-schedule: cannot read tuning records '{{.*}}no-such-file.json': No such file or directory
// MALFORMED: error: pig-schedule: tuning records '{{.*}}schedule-malformed.json' are not valid JSON: [json.exception.parse_error.101] parse error at line 5, column 1: syntax error while parsing object - unexpected end of input; expected '}'
// ILLEGAL: error: pig-schedule: tuning records '{{.*}}schedule-illegal.json': record 1 (K=10 L=150 d=128 bf16): schedule knob 'block' = 48 is illegal (rows per softmax block: 16, 32, 64 or 128) (format: docs/SCHEDULES.md)
// UNKNOWN: error: pig-schedule: tuning records '{{.*}}': record 1 (K=10 L=150 d=128 bf16): unknown schedule knob 'colour' (gqa, block, prefetch, dense_prefetch, tables_ahead, parts)
// VERSION: error: pig-schedule: tuning records '{{.*}}schedule-no-version.json': "version" must be 1 (format: docs/SCHEDULES.md)
// BADKEY: error: pig-schedule: tuning records '{{.*}}': record 1: kernel 'K=10 L=150' is not a kernel key 'K=.. L=.. d=.. f32|bf16|q8'
// TWICE: error: pig-schedule: tuning records '{{.*}}schedule-twice.json' has records 1 and 2 for K=10 L=150 d=128 bf16 on machine 'Test CPU A': keep one
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
