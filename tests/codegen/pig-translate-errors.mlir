// Invalid input: a clear error and a non-zero exit, never a half-written file.
// RUN: split-file %s %t
// RUN: not pig-translate --emit=cpu %t/generic.mlir 2>&1 | FileCheck %s --check-prefix=NOKERNEL
// RUN: not pig-translate --emit=cpu %t/unspecialised.mlir 2>&1 | FileCheck %s --check-prefix=UNSPECIALISED
// RUN: not pig-translate --emit=cpu %t/dynamic-d.mlir 2>&1 | FileCheck %s --check-prefix=DYND
// RUN: pig-opt %t/generic.mlir --pig-decompose --pig-specialize="k=10 l=150" -o %t/unplaced.mlir
// RUN: not pig-translate --emit=cpu %t/unplaced.mlir 2>&1 | FileCheck %s --check-prefix=UNPLACED
// RUN: pig-opt %t/generic.mlir --pig-specialize="k=10 l=150" --pig-partition -o %t/composite.mlir
// RUN: not pig-translate --emit=cpu %t/composite.mlir 2>&1 | FileCheck %s --check-prefix=COMPOSITE
// RUN: pig-opt %t/generic.mlir --pig-decompose --pig-specialize="k=10 l=150" --pig-partition -o %t/unfused.mlir
// RUN: not pig-translate --emit=cpu %t/unfused.mlir 2>&1 | FileCheck %s --check-prefix=UNFUSED
// RUN: pig-opt %t/generic.mlir --pig-decompose --pig-specialize="k=10 l=150" --pig-partition --pig-fuse -o %t/cpu.mlir
// RUN: not pig-translate --emit=cuda %t/cpu.mlir 2>&1 | FileCheck %s --check-prefix=NOGPU
// RUN: not pig-translate --emit=cpu %t/cpu.mlir %t/cpu.mlir 2>&1 | FileCheck %s --check-prefix=TWOINPUTS
// RUN: not pig-translate --emit=cpu-registry %t/cpu.mlir %t/cpu.mlir 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: pig-opt %t/cpu.mlir --pig-schedule="schedule=gqa=union,block=32" -o %t/union.mlir
// RUN: not pig-translate --emit=cpu-registry %t/cpu.mlir %t/union.mlir %t/union.mlir 2>&1 | FileCheck %s --check-prefix=TWICE-SCHEDULED
// RUN: not pig-translate --emit=cpu %t/two-schedules.mlir 2>&1 | FileCheck %s --check-prefix=TWOSCHEDULES
// RUN: not pig-translate --emit=cpu %t/bad-schedule.mlir 2>&1 | FileCheck %s --check-prefix=BADSCHEDULE
// RUN: not pig-translate --emit=cuda %t/gpu-query.mlir 2>&1 | FileCheck %s --check-prefix=GPUQUERY
// RUN: not pig-translate --emit=cpu %t/two-configs.mlir 2>&1 | FileCheck %s --check-prefix=TWOCONFIGS
// RUN: not pig-translate --emit=cpu %t/two-transforms.mlir 2>&1 | FileCheck %s --check-prefix=TWOTRANSFORMS
// RUN: not pig-translate --emit=cpu %t/two-transforms-one-function.mlir 2>&1 | FileCheck %s --check-prefix=TWOTRANSFORMS-ONE
// RUN: not pig-translate --emit=cpu %t/no-pig.mlir 2>&1 | FileCheck %s --check-prefix=NOPIG
// RUN: not pig-translate --emit=cpu %t/syntax.mlir 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not pig-translate --emit=cpu %t/missing.mlir 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: sed "s/@PIG_DTYPE@/!pig.q8/g; s/@PIG_QUERY_DTYPE@/f32/g" %pig_examples/../codegen/decode_step.mlir.in > %t/q8-step.mlir
// RUN: pig-opt %t/q8-step.mlir --pig-decompose --pig-specialize="k=10 l=150 d=64 dtype=q8" --pig-partition=target=cpu+gpu --pig-fuse -o %t/q8-gpu.mlir
// RUN: not pig-translate --emit=cuda %t/q8-gpu.mlir 2>&1 | FileCheck %s --check-prefix=CUDAQ8
// RUN: pig-opt %t/generic.mlir --pig-decompose --pig-specialize="k=10 l=150" --pig-partition=target=cpu+gpu --pig-fuse -o %t/bf16-gpu.mlir
// RUN: not pig-translate --emit=cuda %t/bf16-gpu.mlir %t/q8-gpu.mlir 2>&1 | FileCheck %s --check-prefix=CUDAQ8
// RUN: not pig-translate --emit=cpu %t/q8-d80.mlir 2>&1 | FileCheck %s --check-prefix=Q8D80
// RUN: not pig-translate --emit=cpu %t/unplaced.mlir -o %t/out.cpp
// RUN: not test -e %t/out.cpp

// NOKERNEL: generic.mlir:2:1: error: function @step has no pig.kernel attribute: run --pig-specialize before pig-translate
// UNSPECIALISED: error: 'pig.encode' has unspecialised #pig.lsh<k = ?, l = ?, t = 2, seed = 0>: run --pig-specialize before pig-translate
// UNSPECIALISED: error: 'pig.encode' has unspecialised codes type '!pig.codes<1x?x?>'
// DYND: error: 'pig.encode' has a dynamic head dim in 'tensor<1x?xbf16>': run --pig-specialize before pig-translate
// UNPLACED: error: 'pig.center' is not placed on a device: run --pig-partition before pig-translate
// COMPOSITE: error: 'pig.sampled_attention' is a composite with no kernel: run --pig-decompose before pig-translate
// UNFUSED: error: 'pig.collision_prob' has no kernel of its own (it is served fused with its partner): run --pig-fuse before pig-translate
// NOGPU: error: no pig op of K=10 L=150 d=128 bf16 is placed on the gpu (partition with --pig-partition=target=cpu+gpu): nothing to emit for --emit=cuda
// TWOINPUTS: pig-translate: --emit=cpu takes exactly one input (one file per configuration), got 2
// TWICE: error: kernel configuration K=10 L=150 d=128 bf16 gqa=per_head block=64 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0 is given twice: list each configuration and schedule once
// TWICE-SCHEDULED: error: kernel configuration K=10 L=150 d=128 bf16 gqa=union block=32 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0 is given twice: list each configuration and schedule once
// TWOSCHEDULES: error: function @b has schedule gqa=union block=64 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0 but @a has gqa=per_head block=64 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0: one schedule per module (one file per configuration and schedule)
// BADSCHEDULE: bad-schedule.mlir:2:{{[0-9]+}}: error: schedule knob 'parts' = 9 is illegal (ranges of one kv-head's sampled pass, 0 = automatic, 1..8)
// GPUQUERY: error: 'pig.query' is placed on the gpu in K=8 L=75 d=64 bf16 but has no CUDA kernel
// TWOCONFIGS: error: function @b has kernel K=8 L=75 d=64 bf16 but @a has K=10 L=150 d=64 bf16: one kernel configuration per module
// TWOTRANSFORMS: two-transforms.mlir:9:{{[0-9]+}}: error: 'pig.encode' hashes with transform "plain" but 'pig.encode' in @a hashes with "whiten:a=0.25": one hash transform per module (keys and queries of a step are hashed in one space)
// TWOTRANSFORMS: two-transforms.mlir:3:{{[0-9]+}}: note: the transform "whiten:a=0.25" is fixed here
// TWOTRANSFORMS-ONE: two-transforms-one-function.mlir:5:{{[0-9]+}}: error: 'pig.encode' hashes with transform "pca:r=16" but 'pig.encode' in @f hashes with "whiten:a=0.25": one hash transform per module
// CUDAQ8: error: no CUDA kernel for q8 keys and values (K=10 L=150 d=64 q8): CUDA kernels exist for f32 and bf16 only (its CPU kernels: --emit=cpu)
// Q8D80: q8-d80.mlir:{{[0-9]+}}:1: error: function @f has kernel #pig.kernel<k = 8, l = 75, d = 80, dtype = !pig.q8> that no kernel template serves (K in [1, 16], L in [1, 1024], even d, f32, bf16 or q8; q8 needs d a multiple of 32)
// NOPIG: error: no function uses pig ops: nothing to translate
// SYNTAX: syntax.mlir:1:{{[0-9]+}}: error:
// MISSING: pig-translate: cannot open input file

//--- generic.mlir
// The example step, not yet specialised.
func.func @step(%q: tensor<4x128xbf16>, %k: tensor<2x?x128xbf16>, %v: tensor<2x?x128xbf16>)
    -> (tensor<4x128xf32>, tensor<4xf32>) {
  %o, %lse = pig.sampled_attention %q, %k, %v {
      lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>,
      static_tokens = #pig.static<sink = 4, local = 64>}
      : (tensor<4x128xbf16>, tensor<2x?x128xbf16>, tensor<2x?x128xbf16>)
      -> (tensor<4x128xf32>, tensor<4xf32>)
  return %o, %lse : tensor<4x128xf32>, tensor<4xf32>
}

//--- unspecialised.mlir
func.func @f(%q: tensor<1x64xbf16>) -> !pig.codes<1x?x?>
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>, pig.device = #pig.device<cpu>}
      : tensor<1x64xbf16> -> !pig.codes<1x?x?>
  return %c : !pig.codes<1x?x?>
}

//--- dynamic-d.mlir
func.func @f(%q: tensor<1x?xbf16>) -> !pig.codes<1x75x8>
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0>, pig.device = #pig.device<cpu>}
      : tensor<1x?xbf16> -> !pig.codes<1x75x8>
  return %c : !pig.codes<1x75x8>
}

//--- gpu-query.mlir
func.func @f(%i: !pig.index<75x8>, %c: !pig.codes<1x75x8>) -> tensor<?xi32>
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>} {
  %ids = pig.query %i, %c[0] threshold 2 {pig.device = #pig.device<gpu>}
      : (!pig.index<75x8>, !pig.codes<1x75x8>) -> tensor<?xi32>
  return %ids : tensor<?xi32>
}

//--- two-configs.mlir
func.func @a(%q: tensor<1x64xbf16>) -> !pig.codes<1x150x10>
    attributes {pig.kernel = #pig.kernel<k = 10, l = 150, d = 64, dtype = bf16>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, pig.device = #pig.device<cpu>}
      : tensor<1x64xbf16> -> !pig.codes<1x150x10>
  return %c : !pig.codes<1x150x10>
}
func.func @b(%q: tensor<1x64xbf16>) -> !pig.codes<1x75x8>
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0>, pig.device = #pig.device<cpu>}
      : tensor<1x64xbf16> -> !pig.codes<1x75x8>
  return %c : !pig.codes<1x75x8>
}

//--- two-schedules.mlir
func.func @a(%q: tensor<1x64xbf16>) -> !pig.codes<1x75x8>
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0>, pig.device = #pig.device<cpu>}
      : tensor<1x64xbf16> -> !pig.codes<1x75x8>
  return %c : !pig.codes<1x75x8>
}
func.func @b(%q: tensor<1x64xbf16>) -> !pig.codes<1x75x8>
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>,
                pig.schedule = #pig.schedule<gqa = union>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0>, pig.device = #pig.device<cpu>}
      : tensor<1x64xbf16> -> !pig.codes<1x75x8>
  return %c : !pig.codes<1x75x8>
}

//--- bad-schedule.mlir
func.func @f(%q: tensor<1x64xbf16>) -> !pig.codes<1x75x8>
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>, pig.schedule = #pig.schedule<parts = 9>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0>, pig.device = #pig.device<cpu>}
      : tensor<1x64xbf16> -> !pig.codes<1x75x8>
  return %c : !pig.codes<1x75x8>
}

//--- two-transforms.mlir
func.func @a(%q: tensor<1x64xbf16>) -> !pig.codes<1x75x8>
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0, transform = "whiten:a=0.25">, pig.device = #pig.device<cpu>}
      : tensor<1x64xbf16> -> !pig.codes<1x75x8>
  return %c : !pig.codes<1x75x8>
}
func.func @b(%q: tensor<1x64xbf16>) -> !pig.codes<1x75x8>
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0>, pig.device = #pig.device<cpu>}
      : tensor<1x64xbf16> -> !pig.codes<1x75x8>
  return %c : !pig.codes<1x75x8>
}

//--- two-transforms-one-function.mlir
func.func @f(%q: tensor<1x64xbf16>, %k: tensor<?x64xbf16>) -> (!pig.codes<1x75x8>, !pig.codes<?x75x8>)
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0, transform = "whiten:a=0.25">, pig.device = #pig.device<cpu>}
      : tensor<1x64xbf16> -> !pig.codes<1x75x8>
  %kc = pig.encode %k {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0, transform = "pca:r=16">, pig.device = #pig.device<cpu>}
      : tensor<?x64xbf16> -> !pig.codes<?x75x8>
  return %c, %kc : !pig.codes<1x75x8>, !pig.codes<?x75x8>
}

//--- no-pig.mlir
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

//--- syntax.mlir
func.func @f( {

//--- q8-d80.mlir
func.func @f(%q: tensor<1x80xf32>) -> !pig.codes<1x75x8>
    attributes {pig.kernel = #pig.kernel<k = 8, l = 75, d = 80, dtype = !pig.q8>} {
  %c = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0>, pig.device = #pig.device<cpu>}
      : tensor<1x80xf32> -> !pig.codes<1x75x8>
  return %c : !pig.codes<1x75x8>
}
