// pig_tune_workflows without a model: select on the fixture records (the point written is the
// one printed), bad option values as UsageError naming the flag, the point's layer runs read
// back from a speed record's key (the progress bar is app's: tests/app).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "pig/app/tuning.h"
#include "pig/tune/point.h"
#include "replay.h"
#include "workflows.h"

namespace {

namespace tune = pig::tune;

const std::string kData = PIG_TUNE_TEST_DATA;

std::string ReadAll(const std::string &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

tune::CommonOptions Fixture() {
  tune::CommonOptions c;
  c.records = kData + "/records-smollm2.jsonl";
  return c;
}

TEST(TuneWorkflows, SelectWritesTheCheapestPointWithinTheBound) {
  tune::SelectOptions o;
  o.max_error = 0.35;
  o.out = testing::TempDir() + "/workflows-point.json";
  std::remove(o.out.c_str());
  EXPECT_EQ(tune::RunSelect(Fixture(), o), 0);
  const tune::OperatingPoint p = tune::load_point(o.out);
  EXPECT_EQ(p.layers.size(), 30u);
  EXPECT_LE(p.error, 0.35);
  EXPECT_GT(p.error, 0.34); // the cheapest: close to the bound, not the most accurate
  EXPECT_EQ(p.criterion, "max-error 0.35");
  EXPECT_EQ(p.layers_str().rfind("0:K=10 L=150 t=2 1-2:K=10 L=75 t=2 ", 0), 0u);
}

TEST(TuneWorkflows, SelectWithoutQualityRecordsFails) {
  const std::string empty = testing::TempDir() + "/workflows-empty.jsonl";
  std::ofstream(empty) << "";
  tune::CommonOptions c;
  c.records = empty;
  tune::SelectOptions o;
  o.max_error = 0.1;
  o.out = testing::TempDir() + "/workflows-none.json";
  try {
    tune::RunSelect(c, o);
    FAIL() << "no exception";
  } catch (const tune::UsageError &) {
    FAIL() << "a failed run, not a usage error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("hold no quality measurement"), std::string::npos);
  }
}

TEST(TuneWorkflows, BadValuesAreUsageErrorsNamingTheFlag) {
  tune::SelectOptions o;
  o.min_speedup = 1.2;
  o.as_machine = "cpu|AVX2";
  o.out = testing::TempDir() + "/workflows-bad.json";
  try {
    tune::RunSelect(Fixture(), o);
    FAIL() << "no exception";
  } catch (const tune::UsageError &e) {
    EXPECT_EQ(e.option(), "--as-machine");
    EXPECT_EQ(std::string(e.what()), "--as-machine: " + e.message());
  }
  o = {};
  o.cost = "time";
  o.max_cost2 = 0.1;
  o.as_machine = "Fixture CPU @ 3.0GHz|AVX2|4|4|33554432";
  try {
    tune::RunSelect(Fixture(), o);
    FAIL() << "no exception";
  } catch (const tune::UsageError &e) {
    EXPECT_EQ(e.option(), "--max-cost2");
  }
  tune::EmitManifestOptions em;
  em.point = kData + "/point-smollm2.json";
  em.append = true;
  try {
    tune::RunEmitManifest(em);
    FAIL() << "no exception";
  } catch (const tune::UsageError &e) {
    EXPECT_EQ(e.option(), "--append");
  }
}

TEST(TuneWorkflows, EmitManifestAppendsOnlyTheMissingLines) {
  const std::string m = testing::TempDir() + "/workflows-kernels.txt";
  std::ofstream(m) << "# a manifest\nK=10  L=150 d=64 bf16  # spaced differently\n";
  tune::EmitManifestOptions em;
  em.point = kData + "/point-smollm2.json";
  em.manifest = m;
  em.append = true;
  EXPECT_EQ(tune::RunEmitManifest(em), 0);
  const std::string text = ReadAll(m);
  EXPECT_EQ(text.find("K=10 L=150 d=64 bf16\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nK=8 L=75 d=64 bf16\n"), std::string::npos) << text;
  EXPECT_EQ(tune::RunEmitManifest(em), 0); // nothing left to add
  EXPECT_EQ(ReadAll(m), text);
}

TEST(TuneWorkflows, LayerRunsOfAPointReadBack) {
  const tune::OperatingPoint p = tune::load_point(kData + "/point-smollm2.json");
  EXPECT_EQ(tune::workflow::ParseLayers(p.layers_str()), pig::app::LayerChoices(p));
  EXPECT_THROW(tune::workflow::ParseLayers("0:dense 2:dense"), std::runtime_error);
  EXPECT_THROW(tune::workflow::ParseLayers("0:K=8 L=75"), std::runtime_error);
}

} // namespace
