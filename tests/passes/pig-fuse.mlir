// RUN: pig-opt %s -split-input-file --pig-fuse | FileCheck %s

// collision_prob + weighted_softmax over the same sample set, keys centered by pig.center:
// one pass over the sampled rows, reading the mean instead of the centered keys.
// CHECK-LABEL: func.func @softmax
// CHECK: %[[C:.*]], %[[MEAN:.*]] = pig.center %arg1
// CHECK-NOT: pig.collision_prob
// CHECK-NOT: pig.weighted_softmax
// CHECK: %[[O:.*]], %[[L:.*]] = pig.sampled_softmax_fused %arg0, %arg1, %arg2, %[[MEAN]], %arg3 {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, pig.device = #pig.device<cpu>, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<1x64xf32>, tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1xf32>)
// CHECK-NOT: pig.collision_prob
// CHECK-NOT: pig.weighted_softmax
// CHECK: return %[[O]], %[[L]]
func.func @softmax(%q: tensor<1x64xbf16>, %k: tensor<?x64xbf16>, %v: tensor<?x64xbf16>, %ids: tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1xf32>) {
  %c, %mean = pig.center %k {pig.device = #pig.device<cpu>} : tensor<?x64xbf16> -> tensor<?x64xbf16>, tensor<1x64xf32>
  %u = pig.collision_prob %q, %c, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, pig.device = #pig.device<cpu>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>) -> tensor<?xf32>
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u {static_tokens = #pig.static<sink = 4, local = 64>, pig.device = #pig.device<cpu>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return %o, %l : tensor<1x64xf32>, tensor<1xf32>
}

// -----

// Centered on the GPU and moved to the CPU: the mean moves the same way, once.
// CHECK-LABEL: func.func @moved_keys
// CHECK: %{{.*}}, %[[MEAN:.*]] = pig.center %arg1 {pig.device = #pig.device<gpu>}
// CHECK-NEXT: %[[M:.*]] = pig.transfer %[[MEAN]] {from = #pig.device<gpu>, to = #pig.device<cpu>} : tensor<1x64xf32>
// CHECK-NOT: pig.transfer
// CHECK: pig.sampled_softmax_fused %arg0, %arg1, %arg2, %[[M]], %arg3
// CHECK-NOT: pig.transfer
// CHECK: pig.sampled_softmax_fused %arg0, %arg1, %arg2, %[[M]], %arg4
// CHECK-NOT: pig.transfer
// CHECK: return
func.func @moved_keys(%q: tensor<1x64xbf16>, %k: tensor<?x64xbf16>, %v: tensor<?x64xbf16>, %ids: tensor<?xi32>, %ids2: tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1x64xf32>) {
  %c, %mean = pig.center %k {pig.device = #pig.device<gpu>} : tensor<?x64xbf16> -> tensor<?x64xbf16>, tensor<1x64xf32>
  %cc = pig.transfer %c {from = #pig.device<gpu>, to = #pig.device<cpu>} : tensor<?x64xbf16>
  %u = pig.collision_prob %q, %cc, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, pig.device = #pig.device<cpu>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>) -> tensor<?xf32>
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u {pig.device = #pig.device<cpu>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %u2 = pig.collision_prob %q, %cc, %ids2 {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, pig.device = #pig.device<cpu>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>) -> tensor<?xf32>
  %o2, %l2 = pig.weighted_softmax %q, %k, %v, %ids2, %u2 {pig.device = #pig.device<cpu>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return %o, %o2 : tensor<1x64xf32>, tensor<1x64xf32>
}

// -----

// Not fused: keys not centered by pig.center, or a different sample set.
// CHECK-LABEL: func.func @not_fused
// CHECK-NOT: pig.sampled_softmax_fused
// CHECK: pig.collision_prob
// CHECK: pig.weighted_softmax
// CHECK: pig.collision_prob
// CHECK: pig.weighted_softmax
// CHECK-NOT: pig.sampled_softmax_fused
// CHECK: return
func.func @not_fused(%q: tensor<1x64xbf16>, %k: tensor<?x64xbf16>, %c: tensor<?x64xbf16>, %v: tensor<?x64xbf16>, %ids: tensor<?xi32>, %ids2: tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1x64xf32>) {
  %u = pig.collision_prob %q, %c, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>) -> tensor<?xf32>
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %kc, %mean = pig.center %k : tensor<?x64xbf16> -> tensor<?x64xbf16>, tensor<1x64xf32>
  %u2 = pig.collision_prob %q, %kc, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>) -> tensor<?xf32>
  %o2, %l2 = pig.weighted_softmax %q, %k, %v, %ids2, %u2 : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return %o, %o2 : tensor<1x64xf32>, tensor<1x64xf32>
}

// -----

// The one-row encodes of the two heads of a GQA group become one encode of the group; each
// query reads its row. Through a transfer, the group's codes move once.
// CHECK-LABEL: func.func @gqa_group
// CHECK: %[[CODES:.*]] = pig.encode %arg0 {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, pig.device = #pig.device<gpu>} : tensor<2x64xbf16> -> !pig.codes<2x150x10>
// CHECK-NEXT: %[[MOVED:.*]] = pig.transfer %[[CODES]] {from = #pig.device<gpu>, to = #pig.device<cpu>} : !pig.codes<2x150x10>
// CHECK-NOT: pig.encode
// CHECK-NOT: pig.transfer
// CHECK-DAG: pig.query %arg1, %[[MOVED]][0] threshold 2
// CHECK-DAG: pig.query %arg1, %[[MOVED]][1] threshold 2
// CHECK-NOT: pig.encode
// CHECK-NOT: pig.transfer
// CHECK: return
func.func @gqa_group(%g: tensor<2x64xbf16>, %i: !pig.index<150x10>) -> (tensor<?xi32>, tensor<?xi32>) {
  %q0 = tensor.extract_slice %g[0, 0] [1, 64] [1, 1] : tensor<2x64xbf16> to tensor<1x64xbf16>
  %c0 = pig.encode %q0 {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, pig.device = #pig.device<gpu>} : tensor<1x64xbf16> -> !pig.codes<1x150x10>
  %m0 = pig.transfer %c0 {from = #pig.device<gpu>, to = #pig.device<cpu>} : !pig.codes<1x150x10>
  %ids0 = pig.query %i, %m0[0] threshold 2 {pig.device = #pig.device<cpu>} : (!pig.index<150x10>, !pig.codes<1x150x10>) -> tensor<?xi32>
  %q1 = tensor.extract_slice %g[1, 0] [1, 64] [1, 1] : tensor<2x64xbf16> to tensor<1x64xbf16>
  %c1 = pig.encode %q1 {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, pig.device = #pig.device<gpu>} : tensor<1x64xbf16> -> !pig.codes<1x150x10>
  %m1 = pig.transfer %c1 {from = #pig.device<gpu>, to = #pig.device<cpu>} : !pig.codes<1x150x10>
  %ids1 = pig.query %i, %m1[0] threshold 2 {pig.device = #pig.device<cpu>} : (!pig.index<150x10>, !pig.codes<1x150x10>) -> tensor<?xi32>
  return %ids0, %ids1 : tensor<?xi32>, tensor<?xi32>
}

// -----

// Rows that do not cover the block (or codes used by anything but pig.query) stay apart.
// CHECK-LABEL: func.func @partial_group
// CHECK-COUNT-2: pig.encode %{{.*}} : tensor<1x64xbf16> -> !pig.codes<1x150x10>
func.func @partial_group(%g: tensor<3x64xbf16>, %i: !pig.index<150x10>) -> (tensor<?xi32>, tensor<?xi32>) {
  %q0 = tensor.extract_slice %g[0, 0] [1, 64] [1, 1] : tensor<3x64xbf16> to tensor<1x64xbf16>
  %c0 = pig.encode %q0 {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<1x64xbf16> -> !pig.codes<1x150x10>
  %ids0 = pig.query %i, %c0[0] threshold 2 : (!pig.index<150x10>, !pig.codes<1x150x10>) -> tensor<?xi32>
  %q1 = tensor.extract_slice %g[1, 0] [1, 64] [1, 1] : tensor<3x64xbf16> to tensor<1x64xbf16>
  %c1 = pig.encode %q1 {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<1x64xbf16> -> !pig.codes<1x150x10>
  %ids1 = pig.query %i, %c1[0] threshold 2 : (!pig.index<150x10>, !pig.codes<1x150x10>) -> tensor<?xi32>
  return %ids0, %ids1 : tensor<?xi32>, tensor<?xi32>
}
