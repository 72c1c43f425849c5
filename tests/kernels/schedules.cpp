// Generic kernel sets compiled with schedules other than the default (lsh_schedule.h), for the
// kernel tests: every schedule must compute what pig::ref computes. Three sets cover every value
// of the tested ranges: block 16, 32, 128 (64 is the default), gqa union and per_head, prefetch 0,
// 2, 32 (8), dense_prefetch 0, 16, 256 (64), tables_ahead 0, 1, 32 (8). parts is the runtime's
// (tests/runtime/lsh_attention_test.cpp).
// The sanitizer build (PIG_SCHEDULES_UNION_ONLY) compiles the first set alone: the GQA union path
// (gqa=union, only non-default schedules take it) then runs under the sanitizers too, at the cost
// of one generic set's sanitized compilation instead of three.
#include "tests/native_targets.h" // first: which targets foreach_target compiles
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kernels/schedules.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"
#include "runtime/kernels/lsh-inl.h"

#include "schedules.h"

HWY_BEFORE_NAMESPACE();
namespace pig::test::HWY_NAMESPACE {
using pig::runtime::lsh::GqaStrategy;
using pig::runtime::lsh::Schedule;
constexpr Schedule kS0{GqaStrategy::union_rows, 16, 0, 0, 0, 0};
pig::runtime::lsh::LshKernelSet Make0() {
  return pig::runtime::lsh::HWY_NAMESPACE::MakeKernelSet<0, 0, 0, void, kS0>();
}
#if !PIG_SCHEDULES_UNION_ONLY
constexpr Schedule kS1{GqaStrategy::per_head, 32, 2, 16, 1, 0};
constexpr Schedule kS2{GqaStrategy::union_rows, 128, 32, 256, 32, 0};
pig::runtime::lsh::LshKernelSet Make1() {
  return pig::runtime::lsh::HWY_NAMESPACE::MakeKernelSet<0, 0, 0, void, kS1>();
}
pig::runtime::lsh::LshKernelSet Make2() {
  return pig::runtime::lsh::HWY_NAMESPACE::MakeKernelSet<0, 0, 0, void, kS2>();
}
#endif
} // namespace pig::test::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pig::test {
HWY_EXPORT(Make0);
#if PIG_SCHEDULES_UNION_ONLY
std::vector<pig::runtime::lsh::LshKernelSet> scheduled_generic_sets() {
  return {HWY_DYNAMIC_DISPATCH(Make0)()};
}
#else
HWY_EXPORT(Make1);
HWY_EXPORT(Make2);
std::vector<pig::runtime::lsh::LshKernelSet> scheduled_generic_sets() {
  return {HWY_DYNAMIC_DISPATCH(Make0)(), HWY_DYNAMIC_DISPATCH(Make1)(),
          HWY_DYNAMIC_DISPATCH(Make2)()};
}
#endif
} // namespace pig::test
#endif
