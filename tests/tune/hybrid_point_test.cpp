// pig-tune hybrid without a model: the grid, the choice among measured configurations (what keeps
// to the budget, ties, NaN), and the hybrid point file (round trip, every refusal, the atomic
// write).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "pig/tune/hybrid.h"
#include "pig/tune/record.h"

namespace {

using namespace pig::tune;
namespace fs = std::filesystem;

HybridMeasure measure(double head, double eps, double error, double cost2) {
  HybridMeasure m;
  m.config.head_share = head;
  m.config.epsilon = eps;
  m.error = error;
  m.cost2 = cost2;
  return m;
}

TEST(HybridTune, GridIsEveryCombinationHeadOutermost) {
  const auto g = hybrid_grid({0.1, 0.5}, {0.05, 0.2}, {0, 512}, {0});
  ASSERT_EQ(g.size(), 8u);
  EXPECT_EQ(g[0].spec(), "head=0.1:floor=0.05:rank=hamming");
  EXPECT_EQ(g[1].spec(), "head=0.1:floor=0.05:rank=hamming:bits=512");
  EXPECT_EQ(g[2].spec(), "head=0.1:floor=0.2:rank=hamming");
  EXPECT_EQ(g[7].spec(), "head=0.5:floor=0.2:rank=hamming:bits=512");
  EXPECT_THROW(hybrid_grid({}, {0.1}, {0}, {0}), std::invalid_argument);
  EXPECT_THROW(hybrid_grid({0.1}, {0.0}, {0}, {0}), std::invalid_argument); // floor in (0, 1]
  EXPECT_THROW(hybrid_grid({1.5}, {0.1}, {0}, {0}), std::invalid_argument);
  EXPECT_THROW(hybrid_grid({0.1}, {0.1}, {-1}, {0}), std::invalid_argument);
  // Rankers outermost; bits are the Hamming ranker's only.
  const auto r = hybrid_grid({0.1, 0.5}, {0.05}, {0, 512}, {0},
                             {pig::ref::HybridRank::hamming, pig::ref::HybridRank::quant});
  ASSERT_EQ(r.size(), 4u + 2u);
  EXPECT_EQ(r[3].spec(), "head=0.5:floor=0.05:rank=hamming:bits=512");
  EXPECT_EQ(r[4].spec(), "head=0.1:floor=0.05:rank=quant");
  EXPECT_EQ(r[5].spec(), "head=0.5:floor=0.05:rank=quant");
  EXPECT_THROW(hybrid_grid({0.1}, {0.1}, {0}, {0}, {}), std::invalid_argument);
}

TEST(HybridTune, ChoosesTheLowestErrorThatKeepsToTheBudget) {
  const double budget = 0.03;
  // A fixed tail always keeps to the budget, whatever its draw read (0.033: 10 % over).
  EXPECT_EQ(select_hybrid({measure(0.25, 0, 0.10, 0.030), measure(0.5, 0, 0.08, 0.033)}, budget),
            1u);
  // A growing tail that read more than 2 % over is left out, however accurate.
  EXPECT_EQ(
      select_hybrid({measure(0.25, 0, 0.10, 0.030), measure(0.25, 0.05, 0.01, 0.0307)}, budget),
      0u);
  // ... and one within 2 % competes.
  EXPECT_EQ(
      select_hybrid({measure(0.25, 0, 0.10, 0.030), measure(0.25, 0.05, 0.01, 0.0305)}, budget),
      1u);
  // Ties go to the first; a NaN error never wins.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(select_hybrid({measure(0.1, 0, nan, 0.03), measure(0.25, 0, 0.07, 0.03),
                           measure(0.5, 0, 0.07, 0.03)},
                          budget),
            1u);
  EXPECT_FALSE(select_hybrid({}, budget));
  EXPECT_FALSE(select_hybrid({measure(0.25, 0.05, 0.01, 0.2), measure(0.1, 0, nan, 0.03)}, budget));
}

HybridPoint point() {
  HybridPoint p;
  p.spec = "head=0.5:floor=0.05:rank=hamming:bits=512";
  p.budget = "= magicpig K=10 L=150";
  p.cost2 = 0.029;
  p.error = 0.061;
  p.topk_error = 0.094;
  p.samples = 216;
  p.contexts = {2048, 4096, 8192};
  p.model_hash = "1d88d1bc21ef21a3";
  p.pig_version = "test";
  p.timestamp = "2026-12-05T00:00:00Z";
  return p;
}

TEST(HybridTune, PointFileRoundTrips) {
  const HybridPoint p = point();
  EXPECT_EQ(parse_hybrid_point(to_json(p)), p);
  const std::string path = testing::TempDir() + "/hybrid-point.json";
  save_hybrid_point(path, p);
  EXPECT_EQ(load_hybrid_point(path), p);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // The spec reads back to the configuration it names.
  const pig::ref::HybridConfig c = pig::ref::HybridConfig::parse(load_hybrid_point(path).spec);
  EXPECT_EQ(c.head_share, 0.5);
  EXPECT_EQ(c.floor, 0.05);
  EXPECT_EQ(c.bits, 512);
}

// Each refusal names what is wrong.
TEST(HybridTune, BadPointFilesAreRefusedByName) {
  auto refuses = [](const std::string &text, const std::string &why) {
    try {
      parse_hybrid_point(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const RecordError &e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  std::string good = to_json(point());
  auto with = [&](const std::string &from, const std::string &to) {
    std::string s = good;
    const std::size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  refuses(good.substr(0, good.size() / 2), "not JSON");
  refuses("[]", "must be an object");
  refuses(with("\"hybrid_point\"", "\"operating_point\""), "not 'hybrid_point'");
  refuses(with("\"schema\": 1", "\"schema\": 2"), "schema 2");
  refuses(with("rank=hamming:bits=512", "rank=hamming:bits=x"), "field 'spec'");
  refuses(with("\"cost2\": 0.029", "\"cost2\": 1.5"), "field 'cost2'");
  refuses(with("\"cost2\": 0.029", "\"cost2\": 0"), "field 'cost2'");
  refuses(with("\"error\": 0.061", "\"error\": -1"), "field 'error'");
  refuses(with("\"topk_error\": 0.094", "\"topk_error\": \"x\""), "field 'topk_error'");
  refuses(with("\"samples\": 216", "\"samples\": -3"), "field 'samples'");
  refuses(with("\"spec\"", "\"spek\""), "missing field 'spec'");
  EXPECT_THROW(load_hybrid_point(testing::TempDir() + "/no-such-hybrid-point.json"), RecordError);
  // What could not be read back is not written.
  HybridPoint bad = point();
  bad.spec = "head=2";
  const std::string path = testing::TempDir() + "/bad-hybrid-point.json";
  EXPECT_THROW(save_hybrid_point(path, bad), RecordError);
  EXPECT_FALSE(fs::exists(path));
}

} // namespace
