// --tuning's loader (pig/app/tuning.h): a point made for another model, head dim or KV type is
// refused (or only warned about with force), a point that does not say is warned about, and
// selection from records refuses layers without measurements (issue 28, items 2 and 5).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pig/app/tuning.h"
#include "pig/tune/point.h"
#include "pig/tune/record.h"

namespace {

using namespace pig::tune;
using namespace pig::app;
namespace lsh = pig::runtime::lsh;

// Per test: ctest runs the cases of this file as separate processes, in parallel.
std::string TempPath(const std::string &name) {
  const ::testing::TestInfo *t = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "pig_tuning_test_" + (t ? t->name() : "") + "_" + name;
}

void WriteFile(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A 3-layer point: layer 0 dense, layers 1-2 LSH.
OperatingPoint ThreeLayers(const std::string &kernel, const std::string &model_hash) {
  OperatingPoint p;
  p.data_hash = "fixture";
  p.model_hash = model_hash;
  p.kernel_tail = kernel;
  p.layers = {{0, {{0, 0, 0}, true}, 0, 1},
              {1, {{8, 75, 2}, false}, 0.1, 0.03},
              {2, {{10, 150, 2}, false}, 0.06, 0.03}};
  p.criterion = "max-error 0.1";
  return p;
}

// A "model" file (its bytes are all model_hash_of reads) and the target of a d=64 bf16 run on it.
struct Fixture {
  std::string model = TempPath("model.gguf");
  TuningTarget target;
  Fixture() {
    WriteFile(model, "not really a model, but its bytes have a hash");
    target.n_layers = 3;
    target.head_dim = 64;
    target.kv = lsh::DType::bf16;
    target.model_path = model;
  }
  std::string Point(const std::string &name, const OperatingPoint &p) {
    const std::string path = TempPath(name);
    save_point(path, p);
    return path;
  }
};

TEST(Tuning, ModelHashIsPigTuneAccuracysHashOfTheFileBytes) {
  // The data hash of quality records hashes this value: it must not change (old records). It is
  // FNV-1a's step with the offset basis pig-tune accuracy has always used (1469598103934665603,
  // not FNV's 14695981039346656037).
  const std::string path = TempPath("a.bin");
  WriteFile(path, "a");
  EXPECT_EQ(model_hash_of(path), "44bd8ad473cd9906");
  WriteFile(path, "");
  EXPECT_EQ(model_hash_of(path), "14650fb0739d0383");
  EXPECT_THROW(model_hash_of("/nonexistent/model.gguf"), std::runtime_error);
}

TEST(Tuning, APointMadeForThisModelLoadsWithoutWarnings) {
  Fixture f;
  const std::string file = f.Point("ok.json", ThreeLayers("d=64 bf16", model_hash_of(f.model)));
  const Tuning t = LoadTuning(file, std::nullopt, f.target);
  EXPECT_TRUE(t.warnings.empty()) << t.warnings.front();
  EXPECT_EQ(t.point.model_hash, model_hash_of(f.model));
}

TEST(Tuning, AnotherHeadDimOrKvTypeIsRefusedNamingBoth) {
  Fixture f;
  const std::string file = f.Point("d128.json", ThreeLayers("d=128 q8", model_hash_of(f.model)));
  try {
    LoadTuning(file, std::nullopt, f.target);
    FAIL() << "a d=128 q8 point loaded for a d=64 bf16 run";
  } catch (const TuningMismatch &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--tuning " + file +
                     ": the point was made for head dim 128 (field "
                     "'kernel'), the model's is 64; a q8 KV cache (field "
                     "'kernel'), this run's is bf16 (--kv)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("--force-tuning"), std::string::npos) << m;
  }
  // Each alone.
  Fixture g;
  g.target.kv = lsh::DType::q8;
  EXPECT_THROW(LoadTuning(file, std::nullopt, g.target), TuningMismatch);
  g.target.kv = lsh::DType::bf16;
  g.target.head_dim = 128;
  EXPECT_THROW(LoadTuning(file, std::nullopt, g.target), TuningMismatch);
  g.target.kv = lsh::DType::q8;
  EXPECT_NO_THROW(LoadTuning(file, std::nullopt, g.target));
  // A kernel that cannot be read is refused too (by the point's own validation, on load; written
  // by hand, since save_point refuses to write it).
  std::string text = to_json(ThreeLayers("d=64 bf16", ""));
  text.replace(text.find("d=64 bf16"), 9, "d=sixty bf16");
  const std::string bad = TempPath("bad-kernel.json");
  WriteFile(bad, text);
  try {
    LoadTuning(bad, std::nullopt, f.target);
    FAIL() << "a point whose kernel cannot be read loaded";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("field 'kernel': 'd=sixty bf16'"), std::string::npos)
        << e.what();
  }
}

TEST(Tuning, AnotherModelIsRefused) {
  Fixture f;
  const std::string file =
      f.Point("other-model.json", ThreeLayers("d=64 bf16", "0123456789abcdef"));
  try {
    LoadTuning(file, std::nullopt, f.target);
    FAIL() << "a point of another model loaded";
  } catch (const TuningMismatch &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("another model (field 'model_hash' 0123456789abcdef, " + f.model +
                     " hashes to " + model_hash_of(f.model) + ")"),
              std::string::npos)
        << m;
  }
  // The flag named is the caller's (pig-tune speed --point).
  f.target.flag = "--point";
  try {
    LoadTuning(file, std::nullopt, f.target);
    FAIL();
  } catch (const TuningMismatch &e) {
    EXPECT_EQ(std::string(e.what()).rfind("--point " + file + ": ", 0), 0u) << e.what();
  }
}

TEST(Tuning, ForceTurnsEveryMismatchIntoOneWarning) {
  Fixture f;
  f.target.force = true;
  const std::string file = f.Point("forced.json", ThreeLayers("d=128 q8", "0123456789abcdef"));
  const Tuning t = LoadTuning(file, std::nullopt, f.target);
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_NE(t.warnings[0].find("head dim 128"), std::string::npos) << t.warnings[0];
  EXPECT_NE(t.warnings[0].find("a q8 KV cache"), std::string::npos) << t.warnings[0];
  EXPECT_NE(t.warnings[0].find("another model"), std::string::npos) << t.warnings[0];
  EXPECT_NE(t.warnings[0].find("used anyway (--force-tuning)"), std::string::npos);
}

TEST(Tuning, APointThatDoesNotSayIsAWarningNotAnError) {
  Fixture f;
  // Older points: no model_hash (selected from records without it), no "kernel" (hand-written).
  const std::string file = f.Point("old.json", ThreeLayers("", ""));
  const Tuning t = LoadTuning(file, std::nullopt, f.target);
  ASSERT_EQ(t.warnings.size(), 2u);
  EXPECT_NE(t.warnings[0].find("does not say its head dim and KV type"), std::string::npos);
  EXPECT_NE(t.warnings[1].find("does not name the model it was made for"), std::string::npos);
  // The layer count alone (callers that know no more) checks nothing else.
  const std::string other = f.Point("other.json", ThreeLayers("d=128 q8", "0123456789abcdef"));
  EXPECT_TRUE(LoadTuning(other, std::nullopt, size_t(3)).warnings.empty());
  EXPECT_THROW(LoadTuning(other, std::nullopt, size_t(4)), std::runtime_error);
}

// Quality records of a 3-layer model, layer `missing` left out.
std::string Records(const std::string &name, int missing, const std::string &model_hash) {
  const std::string path = TempPath(name);
  std::remove(path.c_str());
  for (int l = 0; l < 3; ++l) {
    if (l == missing)
      continue;
    for (int L : {75, 150}) {
      Record r;
      r.kind = RecordKind::quality;
      r.kernel = "K=8 L=" + std::to_string(L) + " d=64 bf16";
      r.t = 2;
      r.layer = l;
      r.workload = {1024, 3, 2};
      Quality q;
      q.value = L == 75 ? 0.2 : 0.1;
      q.p90 = 0.3;
      q.cost2 = L == 75 ? 0.02 : 0.04;
      q.seeds = {1};
      q.data_hash = "fixture";
      q.model_hash = model_hash;
      r.quality = q;
      r.pig_version = "test";
      r.timestamp = "2026-01-01T00:00:00Z";
      append_record(path, r);
    }
  }
  return path;
}

TEST(Tuning, SelectionFromRecordsCarriesTheModelHash) {
  Fixture f;
  const std::string mine = Records("mine.jsonl", -1, model_hash_of(f.model));
  const Tuning t = LoadTuning(mine, 0.15, f.target);
  EXPECT_TRUE(t.warnings.empty());
  EXPECT_EQ(t.point.model_hash, model_hash_of(f.model));
  EXPECT_EQ(t.point.kernel_tail, "d=64 bf16");
  const std::string theirs = Records("theirs.jsonl", -1, "0123456789abcdef");
  EXPECT_THROW(LoadTuning(theirs, 0.15, f.target), TuningMismatch);
}

TEST(Tuning, ALayerWithoutMeasurementsIsAnErrorNamingIt) {
  Fixture f;
  const std::string file = Records("missing.jsonl", 1, model_hash_of(f.model));
  try {
    LoadTuning(file, 0.15, f.target);
    FAIL() << "layer 1 became dense silently";
  } catch (const TuningMismatch &) {
    FAIL() << "not a mismatch";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("measure no candidate on layer 1 of 3"), std::string::npos)
        << e.what();
  }
  // require_every_layer names runs of layers.
  QualityTable t;
  t.data_hash = "h";
  t.layers.resize(6);
  t.layers[2].candidates = {{8, 75, 2}};
  t.layers[4].candidates = {{8, 75, 2}};
  try {
    require_every_layer(t);
    FAIL();
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("measure no candidate on layers 0-1, 3, 5 of 6"),
              std::string::npos)
        << e.what();
  }
  for (auto &l : t.layers)
    l.candidates = {{8, 75, 2}};
  EXPECT_NO_THROW(require_every_layer(t));
}

} // namespace
