// RUN: pig-opt %s --pig-decompose | FileCheck %s --implicit-check-not=pig.sampled_attention
// RUN: pig-opt %s --pig-decompose | pig-opt | FileCheck %s --implicit-check-not=pig.sampled_attention

// 4 query heads over 2 kv-heads: per kv-head one center / encode / build_index, per query head
// encode, query, collision_prob, weighted_softmax, dense_attention over the static tokens, merge.

// No pig.sampled_attention is left anywhere (--implicit-check-not).
// CHECK-LABEL: func.func @gqa
// CHECK: %[[K0:.*]] = tensor.extract_slice %arg1[0, 0, 0] [1, %{{.*}}, 64] [1, 1, 1] : tensor<2x?x64xbf16> to tensor<?x64xbf16>
// CHECK: %[[V0:.*]] = tensor.extract_slice %arg2[0, 0, 0]
// CHECK: %[[C0:.*]], %{{.*}} = pig.center %[[K0]] : tensor<?x64xbf16> -> tensor<?x64xbf16>, tensor<1x64xf32>
// CHECK: %[[KC0:.*]] = pig.encode %[[C0]] {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 5>} : tensor<?x64xbf16> -> !pig.codes<?x75x8>
// CHECK: %[[I0:.*]] = pig.build_index %[[KC0]] {static_tokens = #pig.static<sink = 4, local = 16>}
// CHECK: %[[G0:.*]] = tensor.extract_slice %arg0[0, 0] [2, 64] [1, 1] : tensor<4x64xbf16> to tensor<2x64xbf16>
// CHECK: %[[Q0:.*]] = tensor.extract_slice %[[G0]][0, 0] [1, 64] [1, 1] : tensor<2x64xbf16> to tensor<1x64xbf16>
// CHECK: %[[QC0:.*]] = pig.encode %[[Q0]] {{.*}} : tensor<1x64xbf16> -> !pig.codes<1x75x8>
// CHECK: %[[IDS:.*]] = pig.query %[[I0]], %[[QC0]][0] threshold 2
// CHECK: %[[U:.*]] = pig.collision_prob %[[Q0]], %[[C0]], %[[IDS]]
// CHECK: %[[SO:.*]], %[[SL:.*]] = pig.weighted_softmax %[[Q0]], %[[K0]], %[[V0]], %[[IDS]], %[[U]] :
// CHECK: %[[DO:.*]], %[[DL:.*]] = pig.dense_attention %[[Q0]], %[[K0]], %[[V0]] {window = #pig.static<sink = 4, local = 16>}
// CHECK: %[[MO:.*]], %[[ML:.*]] = pig.merge %[[SO]], %[[SL]], %[[DO]], %[[DL]]
// CHECK: tensor.insert_slice %[[MO]] into %{{.*}}[0, 0] [1, 64] [1, 1]
// CHECK: tensor.insert_slice %[[ML]] into %{{.*}}[0] [1] [1]
// CHECK-COUNT-1: pig.center
// CHECK: return
// Totals over the function (whole lines: "4" must not match 14 or 40).
// RUN: pig-opt %s --pig-decompose | grep -c "pig.merge" | FileCheck %s --check-prefix=MERGES --match-full-lines
// MERGES: 4
// RUN: pig-opt %s --pig-decompose | grep -c "pig.query" | FileCheck %s --check-prefix=QUERIES --match-full-lines
// QUERIES: 4
// RUN: pig-opt %s --pig-decompose | grep -c "pig.build_index" | FileCheck %s --check-prefix=INDEXES --match-full-lines
// INDEXES: 2
// RUN: pig-opt %s --pig-decompose | grep -c "pig.center" | FileCheck %s --check-prefix=CENTERS --match-full-lines
// CENTERS: 2
func.func @gqa(%q: tensor<4x64xbf16>, %k: tensor<2x?x64xbf16>, %v: tensor<2x?x64xbf16>) -> (tensor<4x64xf32>, tensor<4xf32>) {
  %o, %lse = pig.sampled_attention %q, %k, %v {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 5>, static_tokens = #pig.static<sink = 4, local = 16>} : (tensor<4x64xbf16>, tensor<2x?x64xbf16>, tensor<2x?x64xbf16>) -> (tensor<4x64xf32>, tensor<4xf32>)
  return %o, %lse : tensor<4x64xf32>, tensor<4xf32>
}

// Primitive ops are left alone.
// CHECK-LABEL: func.func @already_primitive
// CHECK-NEXT: pig.dense_attention
func.func @already_primitive(%q: tensor<1x64xf32>, %k: tensor<?x64xf32>, %v: tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>) {
  %o, %l = pig.dense_attention %q, %k, %v : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return %o, %l : tensor<1x64xf32>, tensor<1xf32>
}
