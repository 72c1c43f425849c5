#include "pig/spec/lsh_params.h"
#include "pig/spec/method.h"

#include <gtest/gtest.h>

namespace {

using pig::spec::LshParams;

TEST(LshParams, ParsesTheOneSpellingOverABase) {
  std::string err;
  auto p = LshParams::parse("K=8,L=75,t=1", &err);
  ASSERT_TRUE(p) << err;
  EXPECT_EQ(*p, (LshParams{8, 75, 1}));
  auto q = LshParams::parse("L=300", &err, LshParams{9, 100, 3});
  ASSERT_TRUE(q) << err;
  EXPECT_EQ(*q, (LshParams{9, 300, 3}));
  EXPECT_EQ(LshParams::parse(p->str()), p);
  EXPECT_EQ(LshParams{}.str(), "K=10,L=150,t=2");
  auto m = LshParams::parse("K=11,L=75,r=1", &err);
  ASSERT_TRUE(m) << err;
  EXPECT_EQ(*m, (LshParams{11, 75, 2, 1}));
  EXPECT_EQ(m->str(), "K=11,L=75,t=2,r=1");
  EXPECT_EQ(LshParams::parse(m->str()), m);
}

TEST(LshParams, ProbesPerTableIsTheHammingBallsSize) {
  EXPECT_EQ(pig::spec::probes_per_table(10, 0), 1);
  EXPECT_EQ(pig::spec::probes_per_table(10, 1), 11);
  EXPECT_EQ(pig::spec::probes_per_table(10, 2), 56);
  EXPECT_EQ(pig::spec::probes_per_table(10, 3), 176);
  EXPECT_EQ(pig::spec::probes_per_table(16, 3), 697);
  EXPECT_EQ(pig::spec::probes_per_table(2, 1), 3);
}

TEST(LshParams, RefusesMalformedAndIllegalInputNamingTheItem) {
  const struct {
    const char *text, *says;
  } bad[] = {
      {"", "expects"},
      {"K=10,", "not key=value"},
      {"10:150", "not key=value"},
      {"K=x", "whole number"},
      {"K=1.5", "whole number"},
      {"K=", "whole number"},
      {"Q=3", "unknown key 'Q'"},
      {"K=3,K=4", "twice"},
      {"K=17", "K = 17 is outside"},
      {"K=0", "K = 0 is outside"},
      {"L=1025", "L = 1025"},
      {"L=4,t=5", "t = 5 is outside"},
      {"K=4294967306", "whole number"},
      {"K=-1", "K = -1 is outside"},
      {"r=4", "r = 4 is outside"},
      {"K=2,r=2", "r = 2 is outside"},
      {"r=-1", "r = -1 is outside"},
      {"r=1,r=1", "twice"},
  };
  for (const auto &b : bad) {
    std::string err;
    EXPECT_FALSE(LshParams::parse(b.text, &err)) << b.text;
    EXPECT_NE(err.find(b.says), std::string::npos) << b.text << ": " << err;
  }
}

TEST(Method, NameTableRoundTrips) {
  for (const auto &i : pig::spec::kMethods) {
    EXPECT_EQ(pig::spec::parse_method(i.name), i.method);
    EXPECT_STREQ(pig::spec::name(i.method), i.name);
  }
  EXPECT_FALSE(pig::spec::parse_method("MagicPIG"));
  EXPECT_EQ(pig::spec::method_names(), "dense, magicpig, topk, quest, oracle, lsh-hybrid");
}

} // namespace
