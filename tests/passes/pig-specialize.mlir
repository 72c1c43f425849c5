// RUN: split-file %s %t
// RUN: pig-opt %t/generic.mlir --pig-specialize="k=10 l=150" | FileCheck %s --check-prefix=OPTION
// RUN: pig-opt %t/generic.mlir --pig-specialize="manifest=%t/manifest.txt l=150" | FileCheck %s --check-prefix=MANIFEST
// RUN: pig-opt %t/fixed.mlir --pig-specialize="manifest=%t/manifest.txt" | FileCheck %s --check-prefix=FIXED
// RUN: not pig-opt %t/generic.mlir --pig-specialize="k=10 l=150 d=64" 2>&1 | FileCheck %s --check-prefix=MISMATCH
// RUN: not pig-opt %t/generic.mlir --pig-specialize="manifest=%t/manifest.txt" 2>&1 | FileCheck %s --check-prefix=AMBIGUOUS
// RUN: not pig-opt %t/generic.mlir --pig-specialize="k=17 l=150" 2>&1 | FileCheck %s --check-prefix=BADK
// RUN: not pig-opt %t/generic.mlir --pig-specialize="k=10 l=1" 2>&1 | FileCheck %s --check-prefix=BADL
// RUN: not pig-opt %t/generic.mlir --pig-specialize="k=10" 2>&1 | FileCheck %s --check-prefix=INCOMPLETE
// RUN: not pig-opt %t/d96.mlir --pig-specialize="k=10 l=150" 2>&1 | FileCheck %s --check-prefix=D96
// RUN: not pig-opt %t/f16.mlir --pig-specialize="k=10 l=150" 2>&1 | FileCheck %s --check-prefix=F16
// RUN: not pig-opt %t/fixed.mlir --pig-specialize="manifest=%t/missing.txt" 2>&1 | FileCheck %s --check-prefix=NOFILE
// RUN: pig-opt %t/dynd.mlir --pig-specialize="k=8 l=75 d=64" | FileCheck %s --check-prefix=DYND
// RUN: pig-opt %t/dynd.mlir --pig-specialize="manifest=%t/manifest.txt k=10" | FileCheck %s --check-prefix=DYND-MANIFEST
// RUN: pig-opt %t/dynd.mlir --pig-decompose --pig-specialize="k=8 l=75 d=64" | FileCheck %s --check-prefix=DYND-DECOMPOSED
// RUN: pig-opt %t/dynd.mlir --pig-decompose --pig-specialize="k=8 l=75 d=64" --pig-partition=target=cpu+gpu --pig-fuse | pig-opt | FileCheck %s --check-prefix=DYND-PIPELINE
// RUN: not pig-opt %t/dynd.mlir --pig-specialize="k=8 l=75" 2>&1 | FileCheck %s --check-prefix=DYND-NOD
// RUN: not pig-opt %t/dynd.mlir --pig-specialize="k=8 l=75 d=96" 2>&1 | FileCheck %s --check-prefix=DYND-D96
// RUN: pig-opt %t/generic.mlir --pig-specialize="manifest=%t/schedules.txt l=150" | FileCheck %s --check-prefix=MANIFEST
// RUN: pig-opt %t/fixed.mlir --pig-specialize="manifest=%t/schedules.txt" | FileCheck %s --check-prefix=FIXED
// RUN: not pig-opt %t/fixed.mlir --pig-specialize="manifest=%t/illegal-knob.txt" 2>&1 | FileCheck %s --check-prefix=ILLEGAL-KNOB
// RUN: not pig-opt %t/fixed.mlir --pig-specialize="manifest=%t/unknown-knob.txt" 2>&1 | FileCheck %s --check-prefix=UNKNOWN-KNOB
// RUN: not pig-opt %t/fixed.mlir --pig-specialize="manifest=%t/knob-first.txt" 2>&1 | FileCheck %s --check-prefix=KNOB-FIRST
// RUN: pig-opt %t/whiten.mlir --pig-specialize="k=10 l=150" | FileCheck %s --check-prefix=WHITEN
// RUN: pig-opt %t/whiten.mlir --pig-specialize="manifest=%t/manifest.txt l=150" | FileCheck %s --check-prefix=WHITEN
// RUN: pig-opt %t/pca.mlir --pig-decompose --pig-specialize="k=8 l=75 d=64" --pig-partition=target=cpu --pig-fuse | pig-opt | FileCheck %s --check-prefix=PCA-PIPELINE
// RUN: not pig-opt %t/pca-wide.mlir --pig-specialize="k=8 l=75 d=64" 2>&1 | FileCheck %s --check-prefix=PCA-WIDE
// RUN: pig-opt %t/pca-wide.mlir --pig-specialize="k=8 l=75 d=128" | FileCheck %s --check-prefix=PCA-WIDE-128
// RUN: not pig-opt %t/two-transforms.mlir --pig-specialize="k=10 l=150" 2>&1 | FileCheck %s --check-prefix=TWO-TRANSFORMS
// RUN: pig-opt %t/q8.mlir --pig-specialize="k=10 l=150 d=64 dtype=q8" | FileCheck %s --check-prefix=Q8
// RUN: pig-opt %t/q8.mlir --pig-specialize="manifest=%t/q8-manifest.txt k=10 d=64" | FileCheck %s --check-prefix=Q8
// RUN: pig-opt %t/q8.mlir --pig-decompose --pig-specialize="manifest=%t/q8-manifest.txt k=10 l=150 d=64 dtype=q8" --pig-partition=target=cpu --pig-fuse | pig-opt | FileCheck %s --check-prefix=Q8-PIPELINE
// RUN: not pig-opt %t/q8.mlir --pig-specialize="k=10 l=150 d=80" 2>&1 | FileCheck %s --check-prefix=Q8-D80
// RUN: not pig-opt %t/q8.mlir --pig-specialize="k=10 l=150 d=64 dtype=bf16" 2>&1 | FileCheck %s --check-prefix=Q8-NOT-BF16
// RUN: not pig-opt %t/fixed.mlir --pig-specialize="manifest=%t/q4.txt" 2>&1 | FileCheck %s --check-prefix=Q4

// Generic K and L are folded into the attributes and the codes / index types; the function
// records the kernel key. Configurations no kernel serves are rejected with the reason.

// OPTION-LABEL: func.func @generic
// OPTION-SAME: pig.kernel = #pig.kernel<k = 10, l = 150, d = 128, dtype = bf16>
// OPTION: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<?x128xbf16> -> !pig.codes<?x150x10>
// OPTION: pig.build_index %{{.*}} : !pig.codes<?x150x10> -> !pig.index<150x10>
// OPTION: pig.encode %{{.*}} -> !pig.codes<1x150x10>
// OPTION: pig.query {{.*}} : (!pig.index<150x10>, !pig.codes<1x150x10>) -> tensor<?xi32>

// MANIFEST-LABEL: func.func @generic
// MANIFEST-SAME: pig.kernel = #pig.kernel<k = 10, l = 150, d = 128, dtype = bf16>
// MANIFEST: !pig.codes<?x150x10>

// FIXED-LABEL: func.func @fixed
// FIXED-SAME: pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>
// FIXED: !pig.codes<1x75x8>

// MISMATCH: error: no kernel configuration serves this function (it fixes K=0 L=0 d=128 bf16)
// AMBIGUOUS: error: 2 manifest entries match this function (K=0 L=0 d=128 bf16); choose one
// BADK: error: no kernel can serve this function: K=17 is outside [1, 16] (uint16 codes)
// BADL: error: no kernel can serve this function: L=1 is smaller than the collision threshold t=2
// INCOMPLETE: error: no kernel can serve this function: the configuration is incomplete
// D96: error: no kernel can serve this function: head dim d=96 has no kernel (kernels exist for 64, 128)
// F16: error: no kernel can serve this function: element type f16 has no kernel (kernels exist for f32, bf16, q8)
// NOFILE: error: cannot read manifest

// A `?` head dim in the query / key / value types becomes the configured d everywhere: the
// signature, the slices of the decomposed step, every pig op and the results. Token counts
// (`?` leading dims) stay dynamic.
// DYND-LABEL: func.func @dynd(%{{.*}}: tensor<4x64xbf16>, %{{.*}}: tensor<2x?x64xbf16>, %{{.*}}: tensor<2x?x64xbf16>) -> (tensor<4x64xf32>, tensor<4xf32>)
// DYND-SAME: pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>
// DYND: pig.sampled_attention {{.*}} : (tensor<4x64xbf16>, tensor<2x?x64xbf16>, tensor<2x?x64xbf16>) -> (tensor<4x64xf32>, tensor<4xf32>)
// DYND: return {{.*}} : tensor<4x64xf32>, tensor<4xf32>

// DYND-MANIFEST-LABEL: func.func @dynd(%{{.*}}: tensor<4x128xbf16>, %{{.*}}: tensor<2x?x128xbf16>, %{{.*}}: tensor<2x?x128xbf16>) -> (tensor<4x128xf32>, tensor<4xf32>)
// DYND-MANIFEST-SAME: pig.kernel = #pig.kernel<k = 10, l = 150, d = 128, dtype = bf16>

// DYND-DECOMPOSED-LABEL: func.func @dynd(%{{.*}}: tensor<4x64xbf16>, %{{.*}}: tensor<2x?x64xbf16>, %{{.*}}: tensor<2x?x64xbf16>) -> (tensor<4x64xf32>, tensor<4xf32>)
// DYND-DECOMPOSED-NOT: x?xbf16>
// DYND-DECOMPOSED-NOT: x?xf32>
// DYND-DECOMPOSED-NOT: tensor.cast
// DYND-DECOMPOSED: tensor.empty() : tensor<4x64xf32>
// DYND-DECOMPOSED: tensor.extract_slice {{.*}} to tensor<?x64xbf16>
// DYND-DECOMPOSED: pig.center {{.*}} : tensor<?x64xbf16> -> tensor<?x64xbf16>, tensor<1x64xf32>
// DYND-DECOMPOSED: pig.encode {{.*}} : tensor<?x64xbf16> -> !pig.codes<?x75x8>
// DYND-DECOMPOSED: pig.encode {{.*}} : tensor<1x64xbf16> -> !pig.codes<1x75x8>
// DYND-DECOMPOSED: pig.weighted_softmax {{.*}} -> (tensor<1x64xf32>, tensor<1xf32>)
// DYND-DECOMPOSED: pig.dense_attention {{.*}} -> (tensor<1x64xf32>, tensor<1xf32>)
// DYND-DECOMPOSED: pig.merge {{.*}} : tensor<1x64xf32>, tensor<1xf32>
// DYND-DECOMPOSED: tensor.insert_slice {{.*}} : tensor<1x64xf32> into tensor<4x64xf32>
// DYND-DECOMPOSED-NOT: x?xf32>
// DYND-DECOMPOSED: return {{.*}} : tensor<4x64xf32>, tensor<4xf32>

// DYND-PIPELINE-LABEL: func.func @dynd
// DYND-PIPELINE: pig.encode {{.*}}#pig.device<gpu>{{.*}} : tensor<2x64xbf16> -> !pig.codes<2x75x8>
// DYND-PIPELINE: pig.sampled_softmax_fused {{.*}} : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<1x64xf32>, tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1xf32>)

// DYND-NOD: error: no kernel can serve this function: the configuration is incomplete (K=8 L=75 d=0 bf16)
// DYND-D96: error: no kernel can serve this function: head dim d=96 has no kernel

// Manifest lines may carry schedule knobs after the dtype (pig-schedule attaches them); lines
// that differ only in their schedule are one configuration to pig-specialize. A malformed or
// illegal knob fails, naming the line.
// ILLEGAL-KNOB: error: manifest '{{.*}}illegal-knob.txt' line 3 ('K=8 L=75 d=64 bf16 gqa=union block=48'): schedule knob 'block' = 48 is illegal (rows per softmax block: 16, 32, 64 or 128)
// UNKNOWN-KNOB: error: manifest '{{.*}}unknown-knob.txt' line 1 ('K=8 L=75 d=64 bf16 colour=3'): unknown schedule knob 'colour' (gqa, block, prefetch, dense_prefetch, tables_ahead, parts)
// KNOB-FIRST: error: manifest '{{.*}}knob-first.txt' line 1: cannot read 'gqa=union' (expected K=.. L=.. d=.. f32|bf16|q8, then optional schedule knobs knob=value)

// The hash transform of #pig.lsh is carried through like K and L (it is not part of the kernel
// key: the same kernels serve every transform), and checked: one transform per function, valid
// for the head dim the function is specialised to (pca:r=R needs R <= d).
// WHITEN-LABEL: func.func @whiten
// WHITEN-SAME: pig.kernel = #pig.kernel<k = 10, l = 150, d = 128, dtype = bf16>
// WHITEN: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "whiten:a=0.25">} : tensor<?x128xbf16> -> !pig.codes<?x150x10>
// WHITEN: pig.encode %{{.*}} {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "whiten:a=0.25">} : tensor<1x128xbf16> -> !pig.codes<1x150x10>

// PCA-PIPELINE-LABEL: func.func @pca
// PCA-PIPELINE-SAME: pig.kernel = #pig.kernel<k = 8, l = 75, d = 64, dtype = bf16>
// PCA-PIPELINE: pig.encode {{.*}}lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0, transform = "pca:r=32+mips:q=0.9">{{.*}} : tensor<?x64xbf16> -> !pig.codes<?x75x8>
// PCA-PIPELINE: pig.encode {{.*}}lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0, transform = "pca:r=32+mips:q=0.9">{{.*}} : tensor<2x64xbf16> -> !pig.codes<2x75x8>
// PCA-PIPELINE: pig.sampled_softmax_fused {{.*}}lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0, transform = "pca:r=32+mips:q=0.9">

// PCA-WIDE: error: hash transform "pca:r=100" is invalid for head dim d = 64: hash transform pca: r must be in [1, 64] (the head dim), got 100
// PCA-WIDE-128-LABEL: func.func @pca_wide
// PCA-WIDE-128-SAME: pig.kernel = #pig.kernel<k = 8, l = 75, d = 128, dtype = bf16>
// PCA-WIDE-128: #pig.lsh<k = 8, l = 75, t = 2, seed = 0, transform = "pca:r=100">

// TWO-TRANSFORMS: two-transforms.mlir:3:{{[0-9]+}}: error: 'pig.encode' op uses hash transform "plain" but the function already uses "whiten:a=0.25": one transform per function

// 8-bit keys and values (!pig.q8) with f32 queries: the key's element type is the keys' (the
// queries stay f32), d is folded into the q8 types too, and the pipeline keeps the queries f32.
// Q8-LABEL: func.func @q8(%{{.*}}: tensor<4x64xf32>, %{{.*}}: tensor<2x?x64x!pig.q8>, %{{.*}}: tensor<2x?x64x!pig.q8>) -> (tensor<4x64xf32>, tensor<4xf32>)
// Q8-SAME: pig.kernel = #pig.kernel<k = 10, l = 150, d = 64, dtype = !pig.q8>
// Q8: pig.sampled_attention {{.*}}lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>{{.*}} : (tensor<4x64xf32>, tensor<2x?x64x!pig.q8>, tensor<2x?x64x!pig.q8>) -> (tensor<4x64xf32>, tensor<4xf32>)

// Q8-PIPELINE-LABEL: func.func @q8
// Q8-PIPELINE-SAME: pig.kernel = #pig.kernel<k = 10, l = 150, d = 64, dtype = !pig.q8>
// Q8-PIPELINE: pig.center {{.*}} : tensor<?x64x!pig.q8> -> tensor<?x64x!pig.q8>, tensor<1x64xf32>
// Q8-PIPELINE: pig.encode {{.*}} : tensor<?x64x!pig.q8> -> !pig.codes<?x150x10>
// Q8-PIPELINE: pig.encode {{.*}} : tensor<2x64xf32> -> !pig.codes<2x150x10>
// Q8-PIPELINE: pig.sampled_softmax_fused {{.*}} : (tensor<1x64xf32>, tensor<?x64x!pig.q8>, tensor<?x64x!pig.q8>, tensor<1x64xf32>, tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1xf32>)
// Q8-PIPELINE: pig.dense_attention {{.*}} : (tensor<1x64xf32>, tensor<?x64x!pig.q8>, tensor<?x64x!pig.q8>)

// Q8-D80: error: no kernel can serve this function: q8 keys and values need a head dim that is a multiple of 32 (whole q8 blocks), not d=80
// Q8-NOT-BF16: error: no kernel configuration serves this function (it fixes K=0 L=0 d=0 q8)
// Q4: error: manifest '{{.*}}q4.txt' line 2 ('K=10 L=150 d=64 q4'): element type 'q4' has no kernels (element types: f32, bf16, q8)

//--- q8-manifest.txt
K=10 L=150 d=64 bf16
K=10 L=150 d=64 q8
K=8 L=75 d=64 q8

//--- q4.txt
K=10 L=150 d=64 bf16
K=10 L=150 d=64 q4

//--- q8.mlir
func.func @q8(%q: tensor<4x?xf32>, %k: tensor<2x?x?x!pig.q8>, %v: tensor<2x?x?x!pig.q8>)
    -> (tensor<4x?xf32>, tensor<4xf32>) {
  %o, %lse = pig.sampled_attention %q, %k, %v {
      lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>,
      static_tokens = #pig.static<sink = 4, local = 64>}
      : (tensor<4x?xf32>, tensor<2x?x?x!pig.q8>, tensor<2x?x?x!pig.q8>) -> (tensor<4x?xf32>, tensor<4xf32>)
  return %o, %lse : tensor<4x?xf32>, tensor<4xf32>
}

//--- manifest.txt
# Kernel configurations that exist: K, L, head dim, element type.
K=10 L=150 d=128 bf16
K=12 L=200 d=128 bf16
K=8 L=75 d=64 bf16
K=9 L=120 d=128 f32

//--- schedules.txt
# Two schedules of one key, and one of another.
K=10 L=150 d=128 bf16
K=10 L=150 d=128 bf16 gqa=union block=32
K=8 L=75 d=64 bf16 prefetch=16   # a comment
K=9 L=120 d=128 f32

//--- illegal-knob.txt
K=10 L=150 d=128 bf16

K=8 L=75 d=64 bf16 gqa=union block=48

//--- unknown-knob.txt
K=8 L=75 d=64 bf16 colour=3

//--- knob-first.txt
K=8 L=75 d=64 gqa=union bf16

//--- generic.mlir
func.func @generic(%k: tensor<?x128xbf16>, %q: tensor<1x128xbf16>) -> tensor<?xi32> {
  %c = pig.encode %k {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>} : tensor<?x128xbf16> -> !pig.codes<?x?x?>
  %i = pig.build_index %c : !pig.codes<?x?x?> -> !pig.index<?x?>
  %qc = pig.encode %q {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>} : tensor<1x128xbf16> -> !pig.codes<1x?x?>
  %ids = pig.query %i, %qc[0] threshold 2 : (!pig.index<?x?>, !pig.codes<1x?x?>) -> tensor<?xi32>
  return %ids : tensor<?xi32>
}

//--- fixed.mlir
func.func @fixed(%q: tensor<1x64xbf16>) -> !pig.codes<1x75x8> {
  %qc = pig.encode %q {lsh = #pig.lsh<k = 8, l = 75, t = 2, seed = 0>} : tensor<1x64xbf16> -> !pig.codes<1x75x8>
  return %qc : !pig.codes<1x75x8>
}

//--- d96.mlir
func.func @d96(%q: tensor<1x96xbf16>) -> !pig.codes<1x?x?> {
  %qc = pig.encode %q {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>} : tensor<1x96xbf16> -> !pig.codes<1x?x?>
  return %qc : !pig.codes<1x?x?>
}

//--- f16.mlir
func.func @f16(%q: tensor<1x64xf16>) -> !pig.codes<1x?x?> {
  %qc = pig.encode %q {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>} : tensor<1x64xf16> -> !pig.codes<1x?x?>
  return %qc : !pig.codes<1x?x?>
}

//--- dynd.mlir
func.func @dynd(%q: tensor<4x?xbf16>, %k: tensor<2x?x?xbf16>, %v: tensor<2x?x?xbf16>)
    -> (tensor<4x?xf32>, tensor<4xf32>) {
  %o, %lse = pig.sampled_attention %q, %k, %v {
      lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>,
      static_tokens = #pig.static<sink = 4, local = 64>}
      : (tensor<4x?xbf16>, tensor<2x?x?xbf16>, tensor<2x?x?xbf16>) -> (tensor<4x?xf32>, tensor<4xf32>)
  return %o, %lse : tensor<4x?xf32>, tensor<4xf32>
}

//--- whiten.mlir
func.func @whiten(%k: tensor<?x128xbf16>, %q: tensor<1x128xbf16>) -> tensor<?xi32> {
  %c = pig.encode %k {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0, transform = "whiten:a=0.25">} : tensor<?x128xbf16> -> !pig.codes<?x?x?>
  %i = pig.build_index %c : !pig.codes<?x?x?> -> !pig.index<?x?>
  %qc = pig.encode %q {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0, transform = "whiten:a=0.25">} : tensor<1x128xbf16> -> !pig.codes<1x?x?>
  %ids = pig.query %i, %qc[0] threshold 2 : (!pig.index<?x?>, !pig.codes<1x?x?>) -> tensor<?xi32>
  return %ids : tensor<?xi32>
}

//--- pca.mlir
func.func @pca(%q: tensor<4x?xbf16>, %k: tensor<2x?x?xbf16>, %v: tensor<2x?x?xbf16>)
    -> (tensor<4x?xf32>, tensor<4xf32>) {
  %o, %lse = pig.sampled_attention %q, %k, %v {
      lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0, transform = "pca:r=32+mips:q=0.9">,
      static_tokens = #pig.static<sink = 4, local = 64>}
      : (tensor<4x?xbf16>, tensor<2x?x?xbf16>, tensor<2x?x?xbf16>) -> (tensor<4x?xf32>, tensor<4xf32>)
  return %o, %lse : tensor<4x?xf32>, tensor<4xf32>
}

//--- pca-wide.mlir
func.func @pca_wide(%q: tensor<4x?xbf16>, %k: tensor<2x?x?xbf16>, %v: tensor<2x?x?xbf16>)
    -> (tensor<4x?xf32>, tensor<4xf32>) {
  %o, %lse = pig.sampled_attention %q, %k, %v {
      lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0, transform = "pca:r=100">,
      static_tokens = #pig.static<sink = 4, local = 64>}
      : (tensor<4x?xbf16>, tensor<2x?x?xbf16>, tensor<2x?x?xbf16>) -> (tensor<4x?xf32>, tensor<4xf32>)
  return %o, %lse : tensor<4x?xf32>, tensor<4xf32>
}

//--- two-transforms.mlir
func.func @two_transforms(%k: tensor<?x128xbf16>, %q: tensor<1x128xbf16>) -> tensor<?xi32> {
  %c = pig.encode %k {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0, transform = "whiten:a=0.25">} : tensor<?x128xbf16> -> !pig.codes<?x?x?>
  %qc = pig.encode %q {lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>} : tensor<1x128xbf16> -> !pig.codes<1x?x?>
  %i = pig.build_index %c : !pig.codes<?x?x?> -> !pig.index<?x?>
  %ids = pig.query %i, %qc[0] threshold 2 : (!pig.index<?x?>, !pig.codes<1x?x?>) -> tensor<?xi32>
  return %ids : tensor<?xi32>
}
