#include "pig/spec/kernel_key.h"

#include <gtest/gtest.h>

namespace {

using pig::spec::DType;
using pig::spec::KernelKey;
using pig::spec::ManifestError;
using pig::spec::parse_manifest_line;
using pig::spec::Schedule;

TEST(KernelKey, TheOneSpellingRoundTrips) {
  const KernelKey key{10, 150, 64, DType::bf16};
  EXPECT_EQ(key.str(), "K=10 L=150 d=64 bf16");
  EXPECT_EQ(key.symbol(), "k10_l150_d64_bf16");
  EXPECT_EQ(KernelKey::parse(key.str()), key);
  for (const KernelKey &k : {KernelKey{8, 75, 128, DType::f32}, KernelKey{16, 1024, 32, DType::q8},
                             KernelKey{1, 1, 2, DType::bf16}})
    EXPECT_EQ(KernelKey::parse(k.str()), k) << k.str();
  // Any whitespace between the words (records written by hand).
  EXPECT_EQ(KernelKey::parse("K=10  L=150\td=64 bf16 "), key);
}

TEST(KernelKey, RefusesMalformedKeysNamingThem) {
  const struct {
    const char *text, *says;
  } bad[] = {
      {"K=10 L=150", "'K=10 L=150' is not a kernel key 'K=.. L=.. d=.. f32|bf16|q8'"},
      {"L=150 K=10 d=64 bf16", "is not a kernel key"},
      {"K=10 L=150 d=64 bf16 gqa=union", "is not a kernel key"},
      {"K=x L=150 d=64 bf16", "is not a kernel key"},
      {"K=-1 L=150 d=64 bf16", "is not a kernel key"},
      {"K=10 L=150 d=99999999999 bf16", "is not a kernel key"},
      {"K=10 L=150 d=64 q4", "element type 'q4' has no kernels (element types: f32, bf16, q8)"},
      {"", "is not a kernel key"},
  };
  for (const auto &b : bad) {
    std::string err;
    EXPECT_FALSE(KernelKey::parse(b.text, &err)) << b.text;
    EXPECT_NE(err.find(b.says), std::string::npos) << b.text << ": " << err;
  }
}

TEST(KernelKey, ValidateNamesTheFirstReason) {
  EXPECT_EQ((KernelKey{10, 150, 64, DType::q8}.validate()), "");
  EXPECT_EQ((KernelKey{17, 150, 64, DType::bf16}.validate()),
            "K=17 is outside [1, 16] (uint16 codes)");
  EXPECT_EQ((KernelKey{0, 150, 64, DType::bf16}.validate()),
            "K=0 is outside [1, 16] (uint16 codes)");
  EXPECT_EQ((KernelKey{10, 1025, 64, DType::bf16}.validate()), "L=1025 is outside [1, 1024]");
  EXPECT_EQ((KernelKey{10, 150, 0, DType::bf16}.validate()), "head dim 0 is not even");
  EXPECT_EQ((KernelKey{10, 150, -4, DType::bf16}.validate()), "head dim -4 is not even");
  EXPECT_EQ((KernelKey{10, 150, 63, DType::bf16}.validate()), "head dim 63 is not even");
  EXPECT_NE((KernelKey{10, 150, 80, DType::q8}.validate()).find("multiple of 32"),
            std::string::npos);
  KernelKey k{10, 150, 64, DType::bf16};
  k.schedule.block = 48;
  EXPECT_NE(k.validate().find("schedule knob 'block' = 48 is illegal"), std::string::npos);
}

TEST(ManifestLine, ReadsKeysKnobsAndComments) {
  ManifestError err;
  auto blank = parse_manifest_line("   # only a comment", &err);
  ASSERT_TRUE(blank);
  EXPECT_TRUE(blank->blank);
  EXPECT_TRUE(parse_manifest_line("")->blank);

  auto plain = parse_manifest_line("K=10 L=150 d=64 bf16", &err);
  ASSERT_TRUE(plain) << err.message;
  EXPECT_FALSE(plain->blank);
  EXPECT_FALSE(plain->has_knobs);
  EXPECT_EQ(plain->key, (KernelKey{10, 150, 64, DType::bf16}));

  auto knobs = parse_manifest_line("K=8 L=75 d=64 q8 gqa=union block=32   # tuned", &err);
  ASSERT_TRUE(knobs) << err.message;
  EXPECT_TRUE(knobs->has_knobs);
  Schedule want;
  want.gqa = pig::spec::GqaStrategy::union_rows;
  want.block = 32;
  EXPECT_EQ(knobs->key, (KernelKey{8, 75, 64, DType::q8, want}));

  // str_with_schedule() is a manifest line.
  auto back = parse_manifest_line(knobs->key.str_with_schedule(), &err);
  ASSERT_TRUE(back) << err.message;
  EXPECT_EQ(back->key, knobs->key);
}

TEST(ManifestLine, RefusesMalformedLinesWithMessages) {
  const struct {
    const char *text, *says;
    bool about_word;
  } bad[] = {
      {"K=8 L=75 d=64 gqa=union bf16",
       "cannot read 'gqa=union' (expected K=.. L=.. d=.. f32|bf16|q8, then optional schedule "
       "knobs knob=value)",
       true},
      {"gqa=union", "cannot read 'gqa=union'", true},
      {"K=10 L=150", "cannot read the end of the line", true},
      {"K=10 L=x d=64 bf16", "cannot read 'L=x'", true},
      {"K=10 L=150 d=64 q4 gqa=union",
       "element type 'q4' has no kernels (element types: f32, bf16, q8)", false},
      {"K=8 L=75 d=64 bf16 colour=3", "unknown schedule knob 'colour'", false},
      {"K=8 L=75 d=64 bf16 gqa=union block=48", "schedule knob 'block' = 48 is illegal", false},
      {"K=8 L=75 d=64 bf16 gqa", "schedule item 'gqa' is not knob=value", false},
  };
  for (const auto &b : bad) {
    ManifestError err;
    EXPECT_FALSE(parse_manifest_line(b.text, &err)) << b.text;
    EXPECT_NE(err.message.find(b.says), std::string::npos) << b.text << ": " << err.message;
    EXPECT_EQ(err.about_word, b.about_word) << b.text;
  }
}

} // namespace
