// RUN: pig-opt %s -split-input-file --canonicalize | FileCheck %s

// A merge with an empty part (attention over no static token) is the other part.
// CHECK-LABEL: func.func @merge_empty
// CHECK-NOT: pig.dense_attention
// CHECK-NOT: pig.merge
// CHECK: %[[O:.*]], %[[L:.*]] = pig.weighted_softmax
// CHECK-NEXT: return %[[O]], %[[L]]
func.func @merge_empty(%q: tensor<1x64xf32>, %k: tensor<?x64xf32>, %v: tensor<?x64xf32>, %ids: tensor<?xi32>, %u: tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>) {
  %so, %sl = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %do, %dl = pig.dense_attention %q, %k, %v {window = #pig.static<sink = 0, local = 0>} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %o, %l = pig.merge %do, %dl, %so, %sl : tensor<1x64xf32>, tensor<1xf32>
  return %o, %l : tensor<1x64xf32>, tensor<1xf32>
}

// -----

// Also when the empty part was moved between devices first.
// CHECK-LABEL: func.func @merge_empty_moved
// CHECK-NOT: pig.merge
// CHECK-NOT: pig.transfer
// CHECK: return %arg0, %arg1
func.func @merge_empty_moved(%o1: tensor<1x64xf32>, %l1: tensor<1xf32>, %q: tensor<1x64xf32>, %k: tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>) {
  %do, %dl = pig.dense_attention %q, %k, %k {window = #pig.static<sink = 0, local = 0>} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %mo = pig.transfer %do {from = #pig.device<gpu>, to = #pig.device<cpu>} : tensor<1x64xf32>
  %ml = pig.transfer %dl {from = #pig.device<gpu>, to = #pig.device<cpu>} : tensor<1xf32>
  %o, %l = pig.merge %o1, %l1, %mo, %ml : tensor<1x64xf32>, tensor<1xf32>
  return %o, %l : tensor<1x64xf32>, tensor<1xf32>
}

// -----

// A non-empty window is kept.
// CHECK-LABEL: func.func @merge_kept
// CHECK: pig.merge
func.func @merge_kept(%o1: tensor<1x64xf32>, %l1: tensor<1xf32>, %q: tensor<1x64xf32>, %k: tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>) {
  %do, %dl = pig.dense_attention %q, %k, %k {window = #pig.static<sink = 4, local = 0>} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %o, %l = pig.merge %o1, %l1, %do, %dl : tensor<1x64xf32>, tensor<1xf32>
  return %o, %l : tensor<1x64xf32>, tensor<1xf32>
}

// -----

// Identity transfers: to the same device, or straight back.
// CHECK-LABEL: func.func @transfers
// CHECK-NOT: pig.transfer
// CHECK: return %arg0, %arg0
func.func @transfers(%x: !pig.codes<1x150x10>) -> (!pig.codes<1x150x10>, !pig.codes<1x150x10>) {
  %same = pig.transfer %x {from = #pig.device<cpu>, to = #pig.device<cpu>} : !pig.codes<1x150x10>
  %there = pig.transfer %x {from = #pig.device<cpu>, to = #pig.device<gpu>} : !pig.codes<1x150x10>
  %back = pig.transfer %there {from = #pig.device<gpu>, to = #pig.device<cpu>} : !pig.codes<1x150x10>
  return %same, %back : !pig.codes<1x150x10>, !pig.codes<1x150x10>
}

// -----

// Results nobody uses are dead: every pig op is free of side effects.
// CHECK-LABEL: func.func @dead
// CHECK-NEXT: return
func.func @dead(%q: tensor<1x64xf32>, %k: tensor<?x64xf32>) {
  %c, %mean = pig.center %k : tensor<?x64xf32> -> tensor<?x64xf32>, tensor<1x64xf32>
  %codes = pig.encode %c {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<?x64xf32> -> !pig.codes<?x150x10>
  %i = pig.build_index %codes : !pig.codes<?x150x10> -> !pig.index<150x10>
  %do, %dl = pig.dense_attention %q, %k, %k : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return
}
