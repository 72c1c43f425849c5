// The kernel registry (specialised, generic and scheduled sets) and schedule parsing.
#include <stdexcept>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "test_util.h"

namespace pig::test {
namespace {

using lsh::DType;
using lsh::KernelKey;
using lsh::KernelRegistry;
using lsh::LshKernelSet;

TEST(Registry, ResolvesSpecialisedAndGeneric) {
  const KernelKey key{10, 150, 64, DType::bf16, lsh::Target::cpu};
  ASSERT_TRUE(KernelRegistry::global().has_specialised(key)); // generated_example.cpp
  const LshKernelSet s = KernelRegistry::global().resolve(key);
  EXPECT_TRUE(s.specialised);
  EXPECT_EQ(s.key, key);
  EXPECT_NE(KernelRegistry::describe(s).find("specialised K=10 L=150 d=64 bf16 cpu"),
            std::string::npos);
  const KernelKey other{9, 120, 64, DType::bf16, lsh::Target::cpu};
  const LshKernelSet g = KernelRegistry::global().resolve(other);
  EXPECT_FALSE(g.specialised);
  EXPECT_EQ(g.key, other);
  EXPECT_NE(KernelRegistry::describe(g).find("generic"), std::string::npos);
  EXPECT_THROW(KernelRegistry::global().resolve({17, 150, 64, DType::bf16, lsh::Target::cpu}),
               std::invalid_argument);
  EXPECT_THROW(KernelRegistry::global().resolve({10, 150, 63, DType::bf16, lsh::Target::cpu}),
               std::invalid_argument);
  EXPECT_THROW(KernelRegistry::global().resolve({10, 150, 64, DType::bf16, lsh::Target::cuda}),
               std::invalid_argument);
}

// resolve(): the exact key (schedule included), else the default schedule's set of the same
// configuration, else the generic set; the served key and the fallback are reported.
LshKernelSet GenericFactory() { return lsh::generic_kernel_set(); }

TEST(Registry, ResolvesSchedules) {
  KernelRegistry r;
  lsh::Schedule s32;
  s32.block = 32;
  lsh::Schedule s16 = s32;
  s16.block = 16;
  const KernelKey plain{10, 150, 64, DType::bf16, lsh::Target::cpu};
  KernelKey k32 = plain, k16 = plain;
  k32.schedule = s32;
  k16.schedule = s16;
  r.add(plain, &GenericFactory);
  r.add(k32, &GenericFactory);
  // Exact.
  LshKernelSet e = r.resolve(k32);
  EXPECT_TRUE(e.specialised);
  EXPECT_FALSE(e.schedule_fallback);
  EXPECT_EQ(e.key, k32);
  EXPECT_NE(KernelRegistry::describe(e).find("schedule gqa=per_head block=32 prefetch=8"),
            std::string::npos)
      << KernelRegistry::describe(e);
  // Not registered: the default schedule of the same configuration, and describe() says so.
  LshKernelSet f = r.resolve(k16);
  EXPECT_TRUE(f.specialised);
  EXPECT_TRUE(f.schedule_fallback);
  EXPECT_EQ(f.key, plain);
  EXPECT_EQ(f.requested_schedule, s16);
  EXPECT_NE(KernelRegistry::describe(f).find("(schedule gqa=per_head block=16 prefetch=8 "
                                             "dense_prefetch=64 tables_ahead=8 parts=0 not "
                                             "registered: default served)"),
            std::string::npos)
      << KernelRegistry::describe(f);
  // Another configuration: generic, default schedule.
  KernelKey other = k16;
  other.L = 120;
  LshKernelSet g = r.resolve(other);
  EXPECT_FALSE(g.specialised);
  EXPECT_TRUE(g.schedule_fallback);
  EXPECT_EQ(g.key.schedule, lsh::Schedule{});
  EXPECT_EQ(g.key.L, 120);
  // An illegal schedule is refused with the knob's message.
  KernelKey bad = plain;
  bad.schedule.block = 48;
  try {
    (void)r.resolve(bad);
    ADD_FAILURE() << "block=48 accepted";
  } catch (const std::invalid_argument &ex) {
    EXPECT_NE(std::string(ex.what()).find("schedule knob 'block' = 48 is illegal"),
              std::string::npos)
        << ex.what();
  }
}

TEST(Schedule, ParsePrintAndValidate) {
  std::string err;
  const auto s = lsh::Schedule::parse("block=32,gqa=union tables_ahead=0", &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->block, 32);
  EXPECT_EQ(s->gqa, lsh::GqaStrategy::union_rows);
  EXPECT_EQ(s->tables_ahead, 0);
  EXPECT_EQ(s->prefetch, 8);
  EXPECT_EQ(s->str(), "gqa=union block=32 prefetch=8 dense_prefetch=64 tables_ahead=0 parts=0");
  EXPECT_EQ(lsh::Schedule::parse(s->str(), &err), s);
  EXPECT_EQ(s->symbol(), "g1_b32_p8_dp64_ta0_pa0");
  const std::pair<const char *, const char *> bad[] = {
      {"block=48", "schedule knob 'block' = 48 is illegal"},
      {"block=256", "schedule knob 'block' = 256 is illegal"},
      {"prefetch=-1", "schedule knob 'prefetch' = -1 is illegal"},
      {"dense_prefetch=257", "'dense_prefetch' = 257 is illegal"},
      {"tables_ahead=65", "'tables_ahead' = 65 is illegal"},
      {"parts=9", "'parts' = 9 is illegal"},
      {"gqa=both", "schedule knob 'gqa' expects per_head or union, got 'both'"},
      {"block=3x", "schedule knob 'block' expects an integer, got '3x'"},
      {"block", "schedule item 'block' is not knob=value"},
      {"rows=64", "unknown schedule knob 'rows'"},
      {"block=32 block=64", "schedule knob 'block' is given twice"},
  };
  for (const auto &[text, want] : bad) {
    err.clear();
    EXPECT_FALSE(lsh::Schedule::parse(text, &err)) << text;
    EXPECT_NE(err.find(want), std::string::npos) << text << ": " << err;
  }
  EXPECT_EQ(lsh::Schedule{}.validate(), "");
}

TEST(Registry, EveryTargetServesTheExample) {
  for_each_target([](const char *name) {
    const LshKernelSet s =
        KernelRegistry::global().resolve({10, 150, 64, DType::bf16, lsh::Target::cpu});
    EXPECT_TRUE(s.specialised);
    EXPECT_STREQ(s.simd_target, name);
    EXPECT_STREQ(lsh::generic_kernel_set().simd_target, name);
  });
}

} // namespace
} // namespace pig::test
