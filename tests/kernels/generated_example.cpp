// An instance of the "contract for generated code" in runtime/kernels/lsh-inl.h, exactly the
// shape pig-translate emits for one manifest key (here K=10 L=150 d=64 bf16). The tests check
// that it compiles for every target and registers a specialised set.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kernels/generated_example.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"
#include "runtime/kernels/lsh-inl.h"
HWY_BEFORE_NAMESPACE();
namespace pig_lsh_k10_l150_d64_bf16::HWY_NAMESPACE {
pig::runtime::lsh::LshKernelSet Make() {
  return pig::runtime::lsh::HWY_NAMESPACE::MakeKernelSet<10, 150, 64, hwy::bfloat16_t>();
}
} // namespace pig_lsh_k10_l150_d64_bf16::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
#if HWY_ONCE
namespace pig_lsh_k10_l150_d64_bf16 {
HWY_EXPORT(Make);
pig::runtime::lsh::LshKernelSet Factory() { return HWY_DYNAMIC_DISPATCH(Make)(); }
PIG_REGISTER_LSH_KERNELS(k10_l150_d64_bf16, 10, 150, 64, bf16, &Factory);
} // namespace pig_lsh_k10_l150_d64_bf16
#endif
