// The schedule variants pig-bench-attention compares with the default schedule, one knob changed
// at a time (pair_knob_*): generic bf16 kernel sets (K, L, d at run time; specialising them buys
// 1.0-1.1x, docs/PERFORMANCE.md), so both sides of a pair differ in the schedule alone.
#include "tests/native_targets.h" // first: which targets foreach_target compiles
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/schedule_variants.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"
#include "runtime/kernels/lsh-inl.h"

#include "schedule_variants.h"

HWY_BEFORE_NAMESPACE();
namespace pig::bench::HWY_NAMESPACE {
using pig::runtime::lsh::GqaStrategy;
using pig::runtime::lsh::LshKernelSet;
using pig::runtime::lsh::Schedule;
using pig::runtime::lsh::HWY_NAMESPACE::MakeKernelSet;

// One knob away from the default {per_head, 64, 8, 64, 8, 0}.
#define PIG_VARIANT(name, ...)                                                                     \
  LshKernelSet name() { return MakeKernelSet<0, 0, 0, hwy::bfloat16_t, Schedule{__VA_ARGS__}>(); }
PIG_VARIANT(Default, GqaStrategy::per_head, 64, 8, 64, 8, 0)
PIG_VARIANT(Union, GqaStrategy::union_rows, 64, 8, 64, 8, 0)
PIG_VARIANT(Block16, GqaStrategy::per_head, 16, 8, 64, 8, 0)
PIG_VARIANT(Block32, GqaStrategy::per_head, 32, 8, 64, 8, 0)
PIG_VARIANT(Block128, GqaStrategy::per_head, 128, 8, 64, 8, 0)
PIG_VARIANT(Prefetch0, GqaStrategy::per_head, 64, 0, 64, 8, 0)
PIG_VARIANT(Prefetch4, GqaStrategy::per_head, 64, 4, 64, 8, 0)
PIG_VARIANT(Prefetch16, GqaStrategy::per_head, 64, 16, 64, 8, 0)
PIG_VARIANT(Dense0, GqaStrategy::per_head, 64, 8, 0, 8, 0)
PIG_VARIANT(Dense32, GqaStrategy::per_head, 64, 8, 32, 8, 0)
PIG_VARIANT(Dense128, GqaStrategy::per_head, 64, 8, 128, 8, 0)
PIG_VARIANT(Tables0, GqaStrategy::per_head, 64, 8, 64, 0, 0)
PIG_VARIANT(Tables4, GqaStrategy::per_head, 64, 8, 64, 4, 0)
PIG_VARIANT(Tables16, GqaStrategy::per_head, 64, 8, 64, 16, 0)
#undef PIG_VARIANT
} // namespace pig::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pig::bench {
HWY_EXPORT(Default);
HWY_EXPORT(Union);
HWY_EXPORT(Block16);
HWY_EXPORT(Block32);
HWY_EXPORT(Block128);
HWY_EXPORT(Prefetch0);
HWY_EXPORT(Prefetch4);
HWY_EXPORT(Prefetch16);
HWY_EXPORT(Dense0);
HWY_EXPORT(Dense32);
HWY_EXPORT(Dense128);
HWY_EXPORT(Tables0);
HWY_EXPORT(Tables4);
HWY_EXPORT(Tables16);

pig::runtime::lsh::LshKernelSet default_schedule_set() { return HWY_DYNAMIC_DISPATCH(Default)(); }

std::vector<pig::runtime::lsh::LshKernelSet> schedule_variant_sets() {
  return {HWY_DYNAMIC_DISPATCH(Union)(),      HWY_DYNAMIC_DISPATCH(Block16)(),
          HWY_DYNAMIC_DISPATCH(Block32)(),    HWY_DYNAMIC_DISPATCH(Block128)(),
          HWY_DYNAMIC_DISPATCH(Prefetch0)(),  HWY_DYNAMIC_DISPATCH(Prefetch4)(),
          HWY_DYNAMIC_DISPATCH(Prefetch16)(), HWY_DYNAMIC_DISPATCH(Dense0)(),
          HWY_DYNAMIC_DISPATCH(Dense32)(),    HWY_DYNAMIC_DISPATCH(Dense128)(),
          HWY_DYNAMIC_DISPATCH(Tables0)(),    HWY_DYNAMIC_DISPATCH(Tables4)(),
          HWY_DYNAMIC_DISPATCH(Tables16)()};
}
} // namespace pig::bench
#endif
