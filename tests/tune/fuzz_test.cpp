// Seeded fuzz of the two texts a person edits by hand and pig-tune writes: operating-point files
// (parse_point) and kernel manifest lines (pig::spec::parse_manifest_line). A fixed count of
// mutated and truncated copies of valid texts never crashes a parser (the sanitizer build runs
// this too); each is either refused with a message or read into a value that prints back to a
// text read as the same value.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "pig/spec/kernel_key.h"
#include "pig/tune/point.h"

namespace pig::tune {
namespace {

// 1-4 random edits: replace, erase, insert a character of `alphabet`, or truncate.
std::string mutate(std::string s, std::mt19937_64 &rng, std::string_view alphabet) {
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const std::size_t at = rng() % s.size();
    switch (rng() % 4) {
    case 0:
      s[at] = alphabet[rng() % alphabet.size()];
      break;
    case 1:
      s.erase(at, 1 + rng() % 8);
      break;
    case 2:
      s.insert(at, 1, alphabet[rng() % alphabet.size()]);
      break;
    default:
      s.resize(at);
    }
  }
  return s;
}

OperatingPoint seed_point() {
  OperatingPoint p;
  p.data_hash = "0123abcd";
  p.kernel_tail = "d=64 bf16";
  p.layers = {{0, Candidate{{0, 0, 0}, true}, 0.0, 1.0},
              {1, Candidate{8, 75, 2}, 0.11, 0.02},
              {2, Candidate{10, 150, 1}, 0.05, 0.04}};
  p.schedule = "gqa=union block=32";
  p.criterion = "max-error 0.12";
  p.error = 0.0533;
  p.cost2 = 0.3533;
  p.attention_s = 0.004;
  p.pig_version = "test";
  p.timestamp = "2026-12-02T00:00:00Z";
  return p;
}

TEST(Fuzz, OperatingPointFiles) {
  const std::string seed = to_json(seed_point());
  std::mt19937_64 rng(20261228);
  const std::string_view alphabet = "{}[]\":,0123456789.-+eEtrufalsn Kdb=\\x";
  std::size_t parsed = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string s = mutate(seed, rng, alphabet);
    try {
      const OperatingPoint p = parse_point(s);
      EXPECT_NO_THROW(validate_point(p)) << s;
      EXPECT_EQ(parse_point(to_json(p)), p) << s;
      ++parsed;
    } catch (const RecordError &e) {
      EXPECT_NE(std::string(e.what()), "") << s;
      ++refused;
    }
  }
  EXPECT_GT(refused, 10000u);
  EXPECT_GT(parsed, 50u); // some mutations keep a valid point (a digit or a string changed)
}

TEST(Fuzz, ManifestLines) {
  const std::string seeds[] = {
      "K=10 L=150 d=64 bf16",
      "K=8 L=75 d=128 q8 gqa=union block=32 prefetch=4   # tuned",
      "K=16 L=1024 d=64 f32 dense_prefetch=256 tables_ahead=0 parts=8",
      "   # only a comment",
  };
  std::mt19937_64 rng(20261229);
  const std::string_view alphabet = "KLd=0123456789 \t#,bfq8_gqaunionblockpr-x";
  std::size_t parsed = 0, refused = 0;
  for (int i = 0; i < 50000; ++i) {
    const std::string s = mutate(seeds[rng() % 4], rng, alphabet);
    spec::ManifestError err;
    const auto line = spec::parse_manifest_line(s, &err);
    if (!line) {
      EXPECT_NE(err.message, "") << s;
      ++refused;
      continue;
    }
    ++parsed;
    if (line->blank)
      continue;
    // The line prints back (every knob when it named some) to a line read as the same key.
    const std::string back = line->has_knobs ? line->key.str_with_schedule() : line->key.str();
    const auto again = spec::parse_manifest_line(back, &err);
    ASSERT_TRUE(again.has_value()) << s << " -> " << back << ": " << err.message;
    EXPECT_EQ(again->key, line->key) << s << " -> " << back;
    EXPECT_EQ(again->has_knobs, line->has_knobs) << s;
    // The key without its schedule reads back through KernelKey::parse as well.
    const auto key = spec::KernelKey::parse(line->key.str());
    ASSERT_TRUE(key.has_value()) << line->key.str();
    EXPECT_EQ(key->str(), line->key.str());
  }
  EXPECT_GT(refused, 10000u);
  EXPECT_GT(parsed, 1000u);
}

} // namespace
} // namespace pig::tune
