// RUN: pig-opt %s --pig-partition=target=cpu | FileCheck %s --check-prefix=CPU --implicit-check-not=pig.transfer
// RUN: pig-opt %s --pig-partition=target=cpu+gpu | FileCheck %s --check-prefix=GPU
// RUN: pig-opt %s --pig-partition=target=gpu | FileCheck %s --check-prefix=GPU
// RUN: pig-opt %s --pig-partition=target=cpu+gpu | pig-opt --pig-partition=target=cpu+gpu | FileCheck %s --check-prefix=GPU
// The GPU checks name five transfers; there are no others (whole lines: "5" must not match 15),
// also after partitioning twice.
// RUN: pig-opt %s --pig-partition=target=cpu+gpu | grep -c pig.transfer | FileCheck %s --check-prefix=TRANSFERS --match-full-lines
// RUN: pig-opt %s --pig-partition=target=gpu | grep -c pig.transfer | FileCheck %s --check-prefix=TRANSFERS --match-full-lines
// RUN: pig-opt %s --pig-partition=target=cpu+gpu | pig-opt --pig-partition=target=cpu+gpu | grep -c pig.transfer | FileCheck %s --check-prefix=TRANSFERS --match-full-lines
// TRANSFERS: 5
// RUN: not pig-opt %s --pig-partition=target=tpu 2>&1 | FileCheck %s --check-prefix=BAD

// One query head against one kv-head, decomposed.

// CPU-only target: everything on the CPU, no transfer anywhere (--implicit-check-not).
// CPU-LABEL: func.func @head
// CPU: pig.center {{.*}}pig.device = #pig.device<cpu>
// CPU: pig.encode {{.*}}pig.device = #pig.device<cpu>
// CPU: pig.build_index {{.*}}pig.device = #pig.device<cpu>
// CPU: pig.encode {{.*}}pig.device = #pig.device<cpu>
// CPU: pig.query {{.*}}pig.device = #pig.device<cpu>
// CPU: pig.collision_prob {{.*}}pig.device = #pig.device<cpu>
// CPU: pig.weighted_softmax {{.*}}pig.device = #pig.device<cpu>
// CPU: pig.dense_attention {{.*}}pig.device = #pig.device<cpu>
// CPU: pig.merge {{.*}}pig.device = #pig.device<cpu>

// Target cpu+gpu: hashing and the static-token attention on the GPU, index, retrieval and the
// sampled softmax on the CPU; one transfer per value and destination.
// GPU-LABEL: func.func @head
// GPU: %[[C:.*]], %{{.*}} = pig.center {{.*}}pig.device = #pig.device<gpu>
// GPU: %[[CC:.*]] = pig.transfer %[[C]] {from = #pig.device<gpu>, to = #pig.device<cpu>} : tensor<?x64xbf16>
// GPU: %[[KC:.*]] = pig.encode %[[C]] {{.*}}pig.device = #pig.device<gpu>
// GPU: %[[KCC:.*]] = pig.transfer %[[KC]] {from = #pig.device<gpu>, to = #pig.device<cpu>} : !pig.codes<?x150x10>
// GPU: %[[I:.*]] = pig.build_index %[[KCC]] {pig.device = #pig.device<cpu>}
// GPU: %[[QC:.*]] = pig.encode %arg0 {{.*}}pig.device = #pig.device<gpu>
// GPU: %[[QCC:.*]] = pig.transfer %[[QC]] {from = #pig.device<gpu>, to = #pig.device<cpu>} : !pig.codes<1x150x10>
// GPU: %[[IDS:.*]] = pig.query %[[I]], %[[QCC]][0] threshold 2 {pig.device = #pig.device<cpu>}
// GPU: %[[U:.*]] = pig.collision_prob %arg0, %[[CC]], %[[IDS]] {{.*}}pig.device = #pig.device<cpu>
// GPU: %[[SO:.*]], %[[SL:.*]] = pig.weighted_softmax {{.*}}pig.device = #pig.device<cpu>
// GPU-DAG: %[[SLG:.*]] = pig.transfer %[[SL]] {from = #pig.device<cpu>, to = #pig.device<gpu>} : tensor<1xf32>
// GPU-DAG: %[[SOG:.*]] = pig.transfer %[[SO]] {from = #pig.device<cpu>, to = #pig.device<gpu>} : tensor<1x64xf32>
// GPU: %[[DO:.*]], %[[DL:.*]] = pig.dense_attention {{.*}}pig.device = #pig.device<gpu>
// GPU: pig.merge %[[SOG]], %[[SLG]], %[[DO]], %[[DL]] {pig.device = #pig.device<gpu>}
// GPU-NOT: pig.transfer

// BAD: error: pig-partition: unknown target 'tpu' (expected cpu or cpu+gpu)
func.func @head(%q: tensor<1x64xbf16>, %k: tensor<?x64xbf16>, %v: tensor<?x64xbf16>) -> (tensor<1x64xf32>, tensor<1xf32>) {
  %c, %mean = pig.center %k : tensor<?x64xbf16> -> tensor<?x64xbf16>, tensor<1x64xf32>
  %kc = pig.encode %c {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<?x64xbf16> -> !pig.codes<?x150x10>
  %i = pig.build_index %kc : !pig.codes<?x150x10> -> !pig.index<150x10>
  %qc = pig.encode %q {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<1x64xbf16> -> !pig.codes<1x150x10>
  %ids = pig.query %i, %qc[0] threshold 2 : (!pig.index<150x10>, !pig.codes<1x150x10>) -> tensor<?xi32>
  %u = pig.collision_prob %q, %c, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>) -> tensor<?xf32>
  %so, %sl = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %do, %dl = pig.dense_attention %q, %k, %v {window = #pig.static<sink = 4, local = 64>} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>) -> (tensor<1x64xf32>, tensor<1xf32>)
  %o, %l = pig.merge %so, %sl, %do, %dl : tensor<1x64xf32>, tensor<1xf32>
  return %o, %l : tensor<1x64xf32>, tensor<1xf32>
}
