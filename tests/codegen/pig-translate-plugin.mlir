// --emit=cpu-plugin: the entry point of a deployment's kernel library (tools/pig-kernel-tree):
// pig_kernel_plugin() lists each configuration's key (with its schedule) and its TU's factory,
// sorted and once each, and serves nothing to a process built from other headers.
// RUN: rm -rf %t && mkdir -p %t
// RUN: pig-opt %pig_examples/decode_step.mlir --pig-decompose --pig-specialize="k=10 l=150" --pig-partition=target=cpu --pig-fuse -o %t/a.mlir
// RUN: pig-opt %s --pig-decompose --pig-specialize="k=8 l=75 d=64" --pig-partition=target=cpu --pig-fuse --pig-schedule="schedule=gqa=union,block=32" -o %t/b.mlir 2>/dev/null
// RUN: pig-translate --emit=cpu-plugin %t/b.mlir %t/a.mlir | FileCheck %s
// RUN: not pig-translate --emit=cpu-plugin %t/a.mlir %t/a.mlir 2>&1 | FileCheck %s --check-prefix=TWICE

func.func @step(%q: tensor<2x64xbf16>, %k: tensor<1x?x64xbf16>, %v: tensor<1x?x64xbf16>)
    -> (tensor<2x64xf32>, tensor<2xf32>) {
  %o, %lse = pig.sampled_attention %q, %k, %v {
      lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>,
      static_tokens = #pig.static<sink = 4, local = 64>}
      : (tensor<2x64xbf16>, tensor<1x?x64xbf16>, tensor<1x?x64xbf16>)
      -> (tensor<2x64xf32>, tensor<2xf32>)
  return %o, %lse : tensor<2x64xf32>, tensor<2xf32>
}

// CHECK: #include "pig/runtime/kernel_plugin.h"
// CHECK: namespace pig_lsh_k10_l150_d128_bf16_g0_b64_p8_dp64_ta8_pa0 {
// CHECK-NEXT: pig::runtime::lsh::LshKernelSet Factory();
// CHECK: namespace pig_lsh_k8_l75_d64_bf16_g1_b32_p8_dp64_ta8_pa0 {
// CHECK: extern "C" __attribute__((visibility("default"))) const pig::runtime::lsh::KernelPluginEntry *
// CHECK-NEXT: pig_kernel_plugin(int abi, std::size_t set_bytes, std::size_t key_bytes, std::size_t *count) {
// CHECK: {{^ +}}{{[{][{]}}10, 150, 128, DType::bf16, Target::cpu, Schedule{GqaStrategy::per_head, 64, 8, 64, 8, 0}}, &pig_lsh_k10_l150_d128_bf16_g0_b64_p8_dp64_ta8_pa0::Factory},
// CHECK: {{^ +}}{{[{][{]}}8, 75, 64, DType::bf16, Target::cpu, Schedule{GqaStrategy::union_rows, 32, 8, 64, 8, 0}}, &pig_lsh_k8_l75_d64_bf16_g1_b32_p8_dp64_ta8_pa0::Factory},
// CHECK: if (!pig::runtime::lsh::KernelPluginCompatible(abi, set_bytes, key_bytes))
// CHECK-NEXT: return nullptr;
// CHECK-NEXT: *count = 2;

// TWICE: error: {{.*}}K=10 L=150 d=128 bf16{{.*}}
