// More specialised sets for the tests and benchmarks, in the generated-code shape (one
// namespace per key; see generated_example.cpp for the single-key file pig-translate emits).
#include "tests/native_targets.h" // first: which targets foreach_target compiles
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kernels/specialisations.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"
#include "runtime/kernels/lsh-inl.h"

#define PIG_TEST_SPECIALISATION(name, K, L, d, T)                                                  \
  namespace name::HWY_NAMESPACE {                                                                  \
  pig::runtime::lsh::LshKernelSet Make() {                                                         \
    return pig::runtime::lsh::HWY_NAMESPACE::MakeKernelSet<K, L, d, T>();                          \
  }                                                                                                \
  }
HWY_BEFORE_NAMESPACE();
PIG_TEST_SPECIALISATION(pig_lsh_k10_l150_d128_bf16, 10, 150, 128, hwy::bfloat16_t)
PIG_TEST_SPECIALISATION(pig_lsh_k8_l75_d64_bf16, 8, 75, 64, hwy::bfloat16_t)
PIG_TEST_SPECIALISATION(pig_lsh_k8_l75_d128_f32, 8, 75, 128, float)
PIG_TEST_SPECIALISATION(pig_lsh_k10_l150_d64_f32, 10, 150, 64, float)
// configs/kernels.txt's q8 line (q8_kernels_test.cpp).
PIG_TEST_SPECIALISATION(pig_lsh_k10_l150_d64_q8, 10, 150, 64, pig::runtime::lsh::Q8)
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#define PIG_TEST_REGISTER(name, K, L, d, dt)                                                       \
  namespace name {                                                                                 \
  HWY_EXPORT(Make);                                                                                \
  pig::runtime::lsh::LshKernelSet Factory() { return HWY_DYNAMIC_DISPATCH(Make)(); }               \
  PIG_REGISTER_LSH_KERNELS(name, K, L, d, dt, &Factory);                                           \
  }
PIG_TEST_REGISTER(pig_lsh_k10_l150_d128_bf16, 10, 150, 128, bf16)
PIG_TEST_REGISTER(pig_lsh_k8_l75_d64_bf16, 8, 75, 64, bf16)
PIG_TEST_REGISTER(pig_lsh_k8_l75_d128_f32, 8, 75, 128, f32)
PIG_TEST_REGISTER(pig_lsh_k10_l150_d64_f32, 10, 150, 64, f32)
PIG_TEST_REGISTER(pig_lsh_k10_l150_d64_q8, 10, 150, 64, q8)
#endif
