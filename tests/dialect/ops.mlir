// RUN: pig-opt %s | pig-opt | FileCheck %s
// RUN: pig-opt %s --mlir-print-op-generic | pig-opt | FileCheck %s

// Round trip of every pig op, attribute and type.

// CHECK-LABEL: func.func @index_side
// CHECK: %[[C:.*]], %[[M:.*]] = pig.center %{{.*}} : tensor<?x128xbf16> -> tensor<?x128xbf16>, tensor<1x128xf32>
// CHECK: %[[CODES:.*]] = pig.encode %[[C]] {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 7>} : tensor<?x128xbf16> -> !pig.codes<?x150x10>
// CHECK: pig.build_index %[[CODES]] {static_tokens = #pig.static<sink = 4, local = 64>} : !pig.codes<?x150x10> -> !pig.index<150x10>
// CHECK: pig.build_index %[[CODES]] : !pig.codes<?x150x10> -> !pig.index<150x10>
func.func @index_side(%k: tensor<?x128xbf16>) -> (!pig.index<150x10>, !pig.index<150x10>, tensor<1x128xf32>) {
  %c, %m = pig.center %k : tensor<?x128xbf16> -> tensor<?x128xbf16>, tensor<1x128xf32>
  %codes = pig.encode %c {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 7>} : tensor<?x128xbf16> -> !pig.codes<?x150x10>
  %i0 = pig.build_index %codes {static_tokens = #pig.static<sink = 4, local = 64>} : !pig.codes<?x150x10> -> !pig.index<150x10>
  %i1 = pig.build_index %codes : !pig.codes<?x150x10> -> !pig.index<150x10>
  return %i0, %i1, %m : !pig.index<150x10>, !pig.index<150x10>, tensor<1x128xf32>
}

// CHECK-LABEL: func.func @query_side
// CHECK: pig.encode %{{.*}} {lsh = #pig.lsh<k = 16, l = 1024, t = 1, seed = 0>} : tensor<4x64xf32> -> !pig.codes<4x1024x16>
// CHECK: pig.query %{{.*}}, %{{.*}}[3] threshold 2 : (!pig.index<1024x16>, !pig.codes<4x1024x16>) -> tensor<?xi32>
// CHECK: pig.collision_prob %{{.*}} {lsh = #pig.lsh<k = 16, l = 1024, t = 2, seed = 0>} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?xi32>) -> tensor<?xf32>
// CHECK: pig.weighted_softmax {{.*}} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
// CHECK: pig.weighted_softmax {{.*}} {static_tokens = #pig.static<sink = 4, local = 64>}
func.func @query_side(%index: !pig.index<1024x16>, %qs: tensor<4x64xf32>, %q: tensor<1x64xf32>,
                      %k: tensor<?x64xf32>, %v: tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>) {
  %codes = pig.encode %qs {lsh = #pig.lsh<k = 16, l = 1024, t = 1, seed = 0>} : tensor<4x64xf32> -> !pig.codes<4x1024x16>
  %ids = pig.query %index, %codes[3] threshold 2 : (!pig.index<1024x16>, !pig.codes<4x1024x16>) -> tensor<?xi32>
  %u = pig.collision_prob %q, %k, %ids {lsh = #pig.lsh<k = 16, l = 1024, t = 2, seed = 0>} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?xi32>) -> tensor<?xf32>
  %o, %lse = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %o2, %lse2 = pig.weighted_softmax %q, %k, %v, %ids, %u {static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %r, %rl = pig.merge %o, %lse, %o2, %lse2 : tensor<1x64xf32>, tensor<1xf32>
  return %r, %rl : tensor<1x64xf32>, tensor<1xf32>
}

// CHECK-LABEL: func.func @fused
// CHECK: pig.sampled_softmax_fused %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<1x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<1x128xf32>, tensor<?xi32>) -> (tensor<1x128xf32>, tensor<1xf32>)
func.func @fused(%q: tensor<1x128xbf16>, %k: tensor<?x128xbf16>, %v: tensor<?x128xbf16>, %mean: tensor<1x128xf32>, %ids: tensor<?xi32>) -> (tensor<1x128xf32>, tensor<1xf32>) {
  %o, %lse = pig.sampled_softmax_fused %q, %k, %v, %mean, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<1x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<1x128xf32>, tensor<?xi32>) -> (tensor<1x128xf32>, tensor<1xf32>)
  return %o, %lse : tensor<1x128xf32>, tensor<1xf32>
}

// CHECK-LABEL: func.func @dense_and_merge
// CHECK: pig.dense_attention %{{.*}} : (tensor<4x128xf16>, tensor<?x128xf16>, tensor<?x128xf16>) -> (tensor<4x128xf32>, tensor<4xf32>)
// CHECK: pig.dense_attention %{{.*}} {window = #pig.static<sink = 4, local = 64>} : (tensor<4x128xf16>
// CHECK: pig.merge %{{.*}} : tensor<4x128xf32>, tensor<4xf32>
func.func @dense_and_merge(%q: tensor<4x128xf16>, %k: tensor<?x128xf16>, %v: tensor<?x128xf16>) -> (tensor<4x128xf32>, tensor<4xf32>) {
  %o1, %l1 = pig.dense_attention %q, %k, %v : (tensor<4x128xf16>, tensor<?x128xf16>, tensor<?x128xf16>) -> (tensor<4x128xf32>, tensor<4xf32>)
  %o2, %l2 = pig.dense_attention %q, %k, %v {window = #pig.static<sink = 4, local = 64>} : (tensor<4x128xf16>, tensor<?x128xf16>, tensor<?x128xf16>) -> (tensor<4x128xf32>, tensor<4xf32>)
  %o, %l = pig.merge %o1, %l1, %o2, %l2 : tensor<4x128xf32>, tensor<4xf32>
  return %o, %l : tensor<4x128xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @composite
// CHECK: pig.sampled_attention %{{.*}} {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<32x128xbf16>, tensor<8x?x128xbf16>, tensor<8x?x128xbf16>) -> (tensor<32x128xf32>, tensor<32xf32>)
func.func @composite(%q: tensor<32x128xbf16>, %k: tensor<8x?x128xbf16>, %v: tensor<8x?x128xbf16>) -> (tensor<32x128xf32>, tensor<32xf32>) {
  %o, %lse = pig.sampled_attention %q, %k, %v {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<32x128xbf16>, tensor<8x?x128xbf16>, tensor<8x?x128xbf16>) -> (tensor<32x128xf32>, tensor<32xf32>)
  return %o, %lse : tensor<32x128xf32>, tensor<32xf32>
}

// CHECK-LABEL: func.func @hybrid_side
// CHECK: %[[IDS:.*]], %[[PI:.*]] = pig.hybrid_select %{{.*}}[1], %{{.*}}, %{{.*}} {bits = 512 : i64, budget = 5.000000e-02 : f64, floor = 1.000000e-01 : f64, head = 2.500000e-01 : f64, rank = "hamming", seed = 7 : i64} : (!pig.codes<2x150x10>, !pig.codes<?x150x10>, tensor<?xf32>) -> (tensor<?xi32>, tensor<?xf32>)
// CHECK: pig.weighted_softmax %{{.*}}, %{{.*}}, %{{.*}}, %[[IDS]], %[[PI]] {static_tokens = #pig.static<sink = 4, local = 64>}
func.func @hybrid_side(%qc: !pig.codes<2x150x10>, %kc: !pig.codes<?x150x10>, %norms: tensor<?xf32>,
                       %q: tensor<1x64xf32>, %k: tensor<?x64xf32>, %v: tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>) {
  %ids, %pi = pig.hybrid_select %qc[1], %kc, %norms {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, rank = "hamming", bits = 512 : i64, seed = 7 : i64} : (!pig.codes<2x150x10>, !pig.codes<?x150x10>, tensor<?xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  %o, %lse = pig.weighted_softmax %q, %k, %v, %ids, %pi {static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return %o, %lse : tensor<1x64xf32>, tensor<1xf32>
}

// CHECK-LABEL: func.func @quant_side
// CHECK: %[[IDS:.*]], %[[PI:.*]] = pig.quant_select %{{.*}}, %{{.*}} {budget = 5.000000e-02 : f64, floor = 1.000000e-01 : f64, head = 2.500000e-01 : f64, kbits = 4 : i64, seed = 7 : i64} : (tensor<1x64xf32>, tensor<?x64xf32>) -> (tensor<?xi32>, tensor<?xf32>)
// CHECK: pig.weighted_softmax %{{.*}}, %{{.*}}, %{{.*}}, %[[IDS]], %[[PI]]
func.func @quant_side(%q: tensor<1x64xf32>, %c: tensor<?x64xf32>, %k: tensor<?x64xf32>,
                      %v: tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>) {
  %ids, %pi = pig.quant_select %q, %c {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, kbits = 4 : i64, seed = 7 : i64} : (tensor<1x64xf32>, tensor<?x64xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  %o, %lse = pig.weighted_softmax %q, %k, %v, %ids, %pi {static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return %o, %lse : tensor<1x64xf32>, tensor<1xf32>
}

// CHECK-LABEL: func.func @placement
// CHECK: pig.encode %{{.*}} {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 1>, pig.device = #pig.device<gpu>}
// CHECK: pig.transfer %{{.*}} {from = #pig.device<gpu>, to = #pig.device<cpu>} : !pig.codes<1x75x8>
// CHECK: pig.query {{.*}}[0] threshold 2 {pig.device = #pig.device<cpu>} : (!pig.index<?x?>, !pig.codes<1x75x8>)
func.func @placement(%q: tensor<1x64xbf16>, %index: !pig.index<?x?>) -> tensor<?xi32> {
  %codes = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 1>, pig.device = #pig.device<gpu>} : tensor<1x64xbf16> -> !pig.codes<1x75x8>
  %moved = pig.transfer %codes {from = #pig.device<gpu>, to = #pig.device<cpu>} : !pig.codes<1x75x8>
  %ids = pig.query %index, %moved[0] threshold 2 {pig.device = #pig.device<cpu>} : (!pig.index<?x?>, !pig.codes<1x75x8>) -> tensor<?xi32>
  return %ids : tensor<?xi32>
}

// CHECK-LABEL: func.func @kernel_key
// CHECK-SAME: attributes {pig.kernel = #pig.kernel<k = 10, l = 150, d = 128, dtype = bf16>}
func.func @kernel_key() attributes {pig.kernel = #pig.kernel<k = 10, l = 150, d = 128, dtype = bf16>} {
  return
}

// The schedule of a function's kernels: omitted knobs take their defaults; every knob is
// printed, in the order of runtime/include/pig/runtime/lsh_schedule.h.
// CHECK-LABEL: func.func @schedule_some_knobs
// CHECK-SAME: attributes {pig.schedule = #pig.schedule<gqa = union, block = 32, prefetch = 8, dense_prefetch = 64, tables_ahead = 8, parts = 0>}
func.func @schedule_some_knobs() attributes {pig.schedule = #pig.schedule<block = 32, gqa = union>} {
  return
}

// CHECK-LABEL: func.func @schedule_default
// CHECK-SAME: attributes {pig.schedule = #pig.schedule<gqa = per_head, block = 64, prefetch = 8, dense_prefetch = 64, tables_ahead = 8, parts = 0>}
func.func @schedule_default() attributes {pig.schedule = #pig.schedule<>} {
  return
}

// Every knob at the ends of its range; gqa as an integer.
// CHECK-LABEL: func.func @schedule_every_knob
// CHECK-SAME: attributes {pig.kernel = #pig.kernel<k = 10, l = 150, d = 64, dtype = bf16>, pig.schedule = #pig.schedule<gqa = per_head, block = 128, prefetch = 0, dense_prefetch = 256, tables_ahead = 64, parts = 8>}
func.func @schedule_every_knob() attributes {pig.kernel = #pig.kernel<k = 10, l = 150, d = 64, dtype = bf16>, pig.schedule = #pig.schedule<gqa = 0, block = 128, prefetch = 0, dense_prefetch = 256, tables_ahead = 64, parts = 8>} {
  return
}

// The hash transform of #pig.lsh (pig::ref::TransformSpec): printed in canonical form
// (TransformSpec::str()), and not at all when plain (the default, also spelled "plain" or
// "none"). Valid for the head dim of every op carrying it.
// CHECK-LABEL: func.func @transforms
// CHECK: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "whiten:a=0.25">} : tensor<?x64xbf16>
// CHECK: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "whiten:a=0.5">} : tensor<?x64xbf16>
// CHECK: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "pca:r=64">} : tensor<?x64xbf16>
// CHECK: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "mips:q=1">} : tensor<?x64xbf16>
// CHECK: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "whiten:a=0.25+mips:q=0.9">} : tensor<?x64xbf16>
// CHECK: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<?x64xbf16>
// CHECK: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<?x64xbf16>
// CHECK: pig.collision_prob %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "pca:r=16">}
// CHECK: pig.sampled_softmax_fused %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "pca:r=16">}
// CHECK: pig.sampled_attention %{{.*}} {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0, transform = "whiten:a=0.25">, static_tokens = #pig.static<sink = 4, local = 64>}
func.func @transforms(%k: tensor<?x64xbf16>, %q: tensor<1x64xbf16>, %v: tensor<?x64xbf16>, %mean: tensor<1x64xf32>, %ids: tensor<?xi32>,
                      %qs: tensor<8x64xbf16>, %ks: tensor<2x?x64xbf16>, %vs: tensor<2x?x64xbf16>) {
  %c0 = pig.encode %k {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "whiten:a=0.25">} : tensor<?x64xbf16> -> !pig.codes<?x150x10>
  %c1 = pig.encode %k {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "whiten">} : tensor<?x64xbf16> -> !pig.codes<?x150x10>
  %c2 = pig.encode %k {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "pca:r=64">} : tensor<?x64xbf16> -> !pig.codes<?x150x10>
  %c3 = pig.encode %k {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "mips">} : tensor<?x64xbf16> -> !pig.codes<?x150x10>
  %c4 = pig.encode %k {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "whiten:a=0.25+mips:q=0.9">} : tensor<?x64xbf16> -> !pig.codes<?x150x10>
  %c5 = pig.encode %k {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "plain">} : tensor<?x64xbf16> -> !pig.codes<?x150x10>
  %c6 = pig.encode %k {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "none">} : tensor<?x64xbf16> -> !pig.codes<?x150x10>
  %u = pig.collision_prob %q, %k, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "pca:r=16">} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>) -> tensor<?xf32>
  %o, %lse = pig.sampled_softmax_fused %q, %k, %v, %mean, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "pca:r=16">} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<1x64xf32>, tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %so, %sl = pig.sampled_attention %qs, %ks, %vs {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0, transform = "whiten:a=0.25">, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<8x64xbf16>, tensor<2x?x64xbf16>, tensor<2x?x64xbf16>) -> (tensor<8x64xf32>, tensor<8xf32>)
  return
}

// 8-bit keys and values (!pig.q8: int8 in blocks of 32 with a bf16 scale) with float queries,
// through every op that reads keys or values, and as a kernel key's element type.
// CHECK-LABEL: func.func @q8_keys_and_values
// CHECK: %[[C:.*]], %{{.*}} = pig.center %{{.*}} : tensor<?x64x!pig.q8> -> tensor<?x64x!pig.q8>, tensor<1x64xf32>
// CHECK: pig.encode %[[C]] {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<?x64x!pig.q8> -> !pig.codes<?x150x10>
// CHECK: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<1x64xf32> -> !pig.codes<1x150x10>
// CHECK: pig.collision_prob %{{.*}} : (tensor<1x64xf32>, tensor<?x64x!pig.q8>, tensor<?xi32>) -> tensor<?xf32>
// CHECK: pig.weighted_softmax %{{.*}} : (tensor<1x64xf32>, tensor<?x64x!pig.q8>, tensor<?x64x!pig.q8>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
// CHECK: pig.sampled_softmax_fused %{{.*}} : (tensor<1x64xbf16>, tensor<?x64x!pig.q8>, tensor<?x64x!pig.q8>, tensor<1x64xf32>, tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1xf32>)
// CHECK: pig.dense_attention %{{.*}} : (tensor<4x128xf16>, tensor<?x128x!pig.q8>, tensor<?x128x!pig.q8>) -> (tensor<4x128xf32>, tensor<4xf32>)
// CHECK: pig.sampled_attention %{{.*}} : (tensor<8x64xf32>, tensor<2x?x64x!pig.q8>, tensor<2x?x64x!pig.q8>) -> (tensor<8x64xf32>, tensor<8xf32>)
func.func @q8_keys_and_values(%k: tensor<?x64x!pig.q8>, %v: tensor<?x64x!pig.q8>, %q: tensor<1x64xf32>, %qb: tensor<1x64xbf16>,
                              %mean: tensor<1x64xf32>, %ids: tensor<?xi32>, %q4: tensor<4x128xf16>, %k128: tensor<?x128x!pig.q8>,
                              %qs: tensor<8x64xf32>, %ks: tensor<2x?x64x!pig.q8>, %vs: tensor<2x?x64x!pig.q8>) {
  %c, %m = pig.center %k : tensor<?x64x!pig.q8> -> tensor<?x64x!pig.q8>, tensor<1x64xf32>
  %kc = pig.encode %c {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<?x64x!pig.q8> -> !pig.codes<?x150x10>
  %qc = pig.encode %q {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<1x64xf32> -> !pig.codes<1x150x10>
  %u = pig.collision_prob %q, %c, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<1x64xf32>, tensor<?x64x!pig.q8>, tensor<?xi32>) -> tensor<?xf32>
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xf32>, tensor<?x64x!pig.q8>, tensor<?x64x!pig.q8>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %fo, %fl = pig.sampled_softmax_fused %qb, %k, %v, %mean, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<1x64xbf16>, tensor<?x64x!pig.q8>, tensor<?x64x!pig.q8>, tensor<1x64xf32>, tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %do, %dl = pig.dense_attention %q4, %k128, %k128 : (tensor<4x128xf16>, tensor<?x128x!pig.q8>, tensor<?x128x!pig.q8>) -> (tensor<4x128xf32>, tensor<4xf32>)
  %so, %sl = pig.sampled_attention %qs, %ks, %vs {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<8x64xf32>, tensor<2x?x64x!pig.q8>, tensor<2x?x64x!pig.q8>) -> (tensor<8x64xf32>, tensor<8xf32>)
  return
}

// CHECK-LABEL: func.func @q8_kernel_key
// CHECK-SAME: attributes {pig.kernel = #pig.kernel<k = 10, l = 150, d = 64, dtype = !pig.q8>}
func.func @q8_kernel_key() attributes {pig.kernel = #pig.kernel<k = 10, l = 150, d = 64, dtype = !pig.q8>} {
  return
}
