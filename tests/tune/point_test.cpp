// Operating points: the point file's round trip and its errors, the quality table built from
// records, and per-layer selection against brute force on small synthetic instances.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "pig/tune/point.h"

namespace {

using namespace pig::tune;

Record quality(int layer, Candidate c, double error, double cost2, std::size_t context = 2048,
               const std::string &hash = "h1") {
  Record r;
  r.kind = RecordKind::quality;
  r.kernel = "K=" + std::to_string(c.K) + " L=" + std::to_string(c.L) + " d=64 bf16";
  r.t = c.t;
  r.layer = layer;
  r.workload.context = context;
  Quality q;
  q.value = error;
  q.p90 = 1.5 * error;
  q.cost2 = cost2;
  q.data_hash = hash;
  r.quality = q;
  r.pig_version = "test";
  r.timestamp = "2026-12-02T00:00:00Z";
  return r;
}

TEST(OperatingPoint, RoundTripAndLayersString) {
  OperatingPoint p;
  p.data_hash = "abc";
  p.kernel_tail = "d=64 bf16";
  p.criterion = "max-error 0.1";
  p.layers = {{0, Candidate{{0, 0, 0}, true}, 0.0, 1.0},
              {1, Candidate{8, 75, 2}, 0.1, 0.02},
              {2, Candidate{8, 75, 2}, 0.12, 0.03},
              {3, Candidate{10, 150, 1}, 0.05, 0.04}};
  p.error = 0.0675;
  p.cost2 = 0.2725;
  p.pig_version = "v";
  p.timestamp = "t";
  EXPECT_EQ(parse_point(to_json(p)), p);
  EXPECT_EQ(p.layers_str(), "0:dense 1-2:K=8 L=75 t=2 3:K=10 L=150 t=1");
  const std::string path = testing::TempDir() + "/point.json";
  save_point(path, p);
  EXPECT_EQ(load_point(path), p);
}

TEST(OperatingPoint, BadFilesNameTheProblem) {
  auto message = [](const std::string &s) -> std::string {
    try {
      parse_point(s);
    } catch (const RecordError &e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message("{").find("not JSON"), std::string::npos);
  EXPECT_NE(message(R"({"schema": 9})").find("schema 9"), std::string::npos);
  EXPECT_NE(message(R"({"schema": 1, "kind": "quality"})").find("a records file?"),
            std::string::npos);
  OperatingPoint p;
  p.layers = {{0, Candidate{}, 0.1, 0.1}, {1, Candidate{}, 0.1, 0.1}};
  std::string s = to_json(p);
  const auto at = s.find("\"layer\": 1");
  ASSERT_NE(at, std::string::npos);
  s.replace(at, 10, "\"layer\": 5");
  EXPECT_NE(message(s).find("layer 5 out of order"), std::string::npos) << message(s);
  s = to_json(p);
  s.replace(s.find("\"K\": 10"), 7, "\"K\": \"x\"");
  EXPECT_NE(message(s).find("field 'K' must be an integer"), std::string::npos) << message(s);
  EXPECT_THROW(load_point(testing::TempDir() + "/no-such-point.json"), RecordError);
}

// A point's contents are checked on load with the manifest's and the runtime's rules: every
// refusal names the field (and the layer), whatever wrote the file.
TEST(OperatingPoint, ContentsAreValidatedOnLoad) {
  OperatingPoint good;
  good.data_hash = "abc";
  good.kernel_tail = "d=64 bf16";
  good.layers = {{0, Candidate{{0, 0, 0}, true}, 0.0, 1.0}, {1, Candidate{8, 75, 2}, 0.1, 0.02}};
  good.error = 0.05;
  good.cost2 = 0.51;
  ASSERT_NO_THROW(parse_point(to_json(good)));
  auto refusal = [&](const std::string &from, const std::string &to) -> std::string {
    std::string s = to_json(good);
    const auto at = s.find(from);
    if (at == std::string::npos)
      return "'" + from + "' not in the point";
    s.replace(at, from.size(), to);
    try {
      parse_point(s);
    } catch (const RecordError &e) {
      return e.what();
    }
    return "accepted";
  };
  auto names = [](const std::string &message, const std::string &what) {
    return message.find(what) != std::string::npos;
  };
  const struct {
    const char *from, *to, *expect;
  } bad[] = {
      {"\"K\": 8", "\"K\": 99", "layers[1]: field 'K': K = 99 is outside [1, 16]"},
      {"\"K\": 8", "\"K\": 0", "layers[1]: field 'K'"},
      {"\"K\": 8", "\"K\": 4294967304", "field 'K' = 4294967304 is outside int"},
      {"\"L\": 75", "\"L\": 0", "layers[1]: field 'L': L = 0 is outside [1, 1024]"},
      {"\"L\": 75", "\"L\": 2000", "layers[1]: field 'L'"},
      {"\"t\": 2", "\"t\": 76", "layers[1]: field 't': t = 76 is outside [1, L = 75]"},
      {"\"t\": 2", "\"t\": 0", "layers[1]: field 't'"},
      {"\"schedule\": \"\"", "\"schedule\": \"block=48\"",
       "field 'schedule': schedule knob 'block' = 48"},
      {"\"schedule\": \"\"", "\"schedule\": \"blok=32\"",
       "field 'schedule': unknown schedule knob 'blok'"},
      {"\"kernel\": \"d=64 bf16\"", "\"kernel\": \"d=64 f12\"", "field 'kernel'"},
      {"\"kernel\": \"d=64 bf16\"", "\"kernel\": \"64 bf16\"", "field 'kernel'"},
      {"\"error\": 0.1", "\"error\": -0.1", "layers[1]: field 'error' = -0.1 is outside"},
      {"\"error\": 0.1", "\"error\": 1e999", "number overflow"},
      {"\"cost2\": 0.02", "\"cost2\": 1.5", "layers[1]: field 'cost2' = 1.5 is outside [0, 1]"},
      {"\"cost2\": 0.02", "\"cost2\": -1e-3", "layers[1]: field 'cost2'"},
      {"\"error\": 0.05", "\"error\": -1", "point: field 'error' = -1"},
      {"\"cost2\": 0.51", "\"cost2\": 2", "point: field 'cost2' = 2"},
      {"\"cost2\": 0.51", "\"cost2\": -1e999", "number overflow"},
      {"\"attention_s\": 0", "\"attention_s\": -3", "field 'attention_s' = -3"},
      {"\"error\": 0.05", "\"error\": null", "field 'error' must be a number, not null"},
  };
  for (const auto &b : bad) {
    const std::string m = refusal(b.from, b.to);
    EXPECT_TRUE(names(m, b.expect)) << b.to << ": " << m;
  }
  // NaN cannot be spelled in JSON: the writer refuses it instead of writing null.
  OperatingPoint nan = good;
  nan.layers[1].error = std::nan("");
  EXPECT_THROW(save_point(testing::TempDir() + "/nan-point.json", nan), RecordError);
  nan = good;
  nan.layers[1].cost2 = std::numeric_limits<double>::infinity();
  EXPECT_THROW(validate_point(nan), RecordError);
  nan = good;
  nan.error = std::nan("");
  EXPECT_THROW(validate_point(nan), RecordError);
  nan = good;
  nan.layers[1].c.L = 0;
  EXPECT_THROW(validate_point(nan), RecordError);
  // A dense layer needs no K, L, t; an LSH layer at the limits is legal.
  OperatingPoint edge = good;
  edge.layers[1].c = Candidate{16, 1024, 1024};
  edge.schedule = "gqa=union block=128";
  EXPECT_NO_THROW(validate_point(edge));
  EXPECT_EQ(parse_point(to_json(edge)), edge);
}

// save_point's failures, injected in ways that hold as root too (a read-only directory does
// not stop root): the write fails (the temporary is a link to /dev/full), the rename fails (the
// target is a non-empty directory), the temporary cannot be created (a directory holds its name;
// the parent is a file). Each throws, keeps the old file, and leaves no temporary of its own.
TEST(OperatingPoint, FailedWritesKeepTheOldFileAndLeaveNoTemporary) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / "pig-atomic-point";
  fs::remove_all(dir);
  fs::create_directories(dir);
  OperatingPoint p;
  p.data_hash = "new";
  p.layers = {{0, Candidate{8, 75, 2}, 0.1, 0.02}};
  p.error = 0.1;
  p.cost2 = 0.02;
  auto read = [](const fs::path &f) {
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  auto write = [](const fs::path &f, const std::string &text) { std::ofstream(f) << text; };
  const fs::path target = dir / "point.json", tmp = dir / "point.json.tmp";

  if (fs::exists("/dev/full")) { // the write fails (ENOSPC) after the temporary was opened
    write(target, "old");
    fs::create_symlink("/dev/full", tmp);
    EXPECT_THROW(save_point(target.string(), p), RecordError);
    EXPECT_EQ(read(target), "old");
    EXPECT_FALSE(fs::exists(fs::symlink_status(tmp))) << "the temporary was left behind";
  }

  // The rename fails: a non-empty directory in place of the target.
  const fs::path as_dir = dir / "is-a-dir.json";
  fs::create_directories(as_dir / "inside");
  EXPECT_THROW(save_point(as_dir.string(), p), RecordError);
  EXPECT_TRUE(fs::is_directory(as_dir / "inside"));
  EXPECT_FALSE(fs::exists(dir / "is-a-dir.json.tmp")) << "the temporary was left behind";

  // The temporary cannot be created: a directory holds its name (not ours: it stays).
  fs::remove(tmp);
  write(target, "old");
  fs::create_directories(tmp);
  EXPECT_THROW(save_point(target.string(), p), RecordError);
  EXPECT_EQ(read(target), "old");
  EXPECT_TRUE(fs::is_directory(tmp));
  fs::remove(tmp);

  // The parent is a file.
  write(dir / "file", "x");
  EXPECT_THROW(save_point((dir / "file" / "point.json").string(), p), RecordError);
  EXPECT_EQ(read(dir / "file"), "x");

  // And a write that succeeds replaces the old file and leaves no temporary.
  save_point(target.string(), p);
  EXPECT_EQ(load_point(target.string()), p);
  EXPECT_FALSE(fs::exists(fs::symlink_status(tmp)));
  fs::remove_all(dir);
}

TEST(QualityTable, AveragesContextsAndRefusesAmbiguity) {
  std::vector<Record> rs{quality(0, {8, 75, 2}, 0.1, 0.02, 2048),
                         quality(0, {8, 75, 2}, 0.3, 0.04, 4096),
                         quality(1, {8, 75, 2}, 0.2, 0.03, 2048)};
  QualityTable t = build_quality_table(rs, 2);
  ASSERT_EQ(t.layers[0].candidates.size(), 1u);
  EXPECT_DOUBLE_EQ(t.layers[0].error[0], 0.2);
  EXPECT_DOUBLE_EQ(t.layers[0].cost2[0], 0.03);
  EXPECT_EQ(t.kernel_tail, "d=64 bf16");
  EXPECT_EQ(t.contexts, (std::vector<std::size_t>{2048, 4096}));
  EXPECT_EQ(t.common(), (std::vector<Candidate>{{8, 75, 2}}));
  rs.push_back(quality(1, {8, 75, 2}, 0.2, 0.03, 2048, "h2"));
  EXPECT_THROW(build_quality_table(rs, 2), RecordError);
  EXPECT_NO_THROW(build_quality_table(rs, 2, "h2"));
  EXPECT_THROW(build_quality_table(rs, 1, "h1"), RecordError); // layer 1 of a 1-layer model
  EXPECT_THROW(build_quality_table({}, 2), RecordError);
}

// Brute force over every combination of a small instance.
struct Best {
  double cost = 1e300, error = 1e300;
};
Best brute(const QualityTable &t, double bound, bool on_error) {
  const std::size_t n = t.layers.size();
  std::vector<std::size_t> idx(n, 0);
  Best b;
  for (;;) {
    double e = 0, c = 0;
    for (std::size_t l = 0; l < n; ++l) {
      const auto &lt = t.layers[l];
      if (idx[l] == lt.candidates.size())
        c += 1.0; // dense
      else {
        e += lt.error[idx[l]];
        c += lt.cost2[idx[l]];
      }
    }
    e /= double(n);
    c /= double(n);
    if (on_error && e <= bound && c < b.cost)
      b = {c, e};
    if (!on_error && c <= bound && e < b.error)
      b = {c, e};
    std::size_t l = 0;
    while (l < n && ++idx[l] > t.layers[l].candidates.size())
      idx[l++] = 0;
    if (l == n)
      break;
  }
  return b;
}

TEST(Selection, FeasibleAndExactlyTheBruteForceOptimum) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int cases = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<Record> rs;
    const int layers = 2 + int(rng() % 4);
    for (int l = 0; l < layers; ++l)
      for (int K : {6, 8, 10})
        for (int L : {50, 150}) {
          // More tables and fewer bits: more accurate and dearer, with a layer-specific scale.
          const double hard = 0.5 + u(rng);
          const double cost = std::min(1.0, 0.01 * L / 50.0 * std::pow(2.0, 10 - K) * hard);
          const double err = 0.05 * hard / std::sqrt(cost * 100) + 0.01 * u(rng);
          rs.push_back(quality(l, {K, L, 2}, err, cost));
        }
    const QualityTable t = build_quality_table(rs, std::size_t(layers));
    for (double bound : {0.02, 0.05, 0.1}) {
      const auto p = select_per_layer_max_error(t, bound);
      ASSERT_TRUE(p.has_value());
      EXPECT_LE(p->error, bound * (1 + 1e-9));
      const Best b = brute(t, bound, true);
      EXPECT_NEAR(p->cost2, b.cost, 1e-12) << "trial " << trial << " bound " << bound;
      ++cases;
    }
    for (double bound : {0.05, 0.2, 0.5}) {
      const auto p = select_per_layer_max_cost(t, bound);
      const Best b = brute(t, bound, false);
      if (b.error > 1e299) {
        EXPECT_FALSE(p.has_value());
        continue;
      }
      ASSERT_TRUE(p.has_value());
      EXPECT_LE(p->cost2, bound * (1 + 1e-9));
      EXPECT_NEAR(p->error, b.error, 1e-12) << "trial " << trial << " bound " << bound;
      ++cases;
    }
  }
  EXPECT_GT(cases, 1000);
}

// Instances where the relaxation's hull point, and the greedy pass from it, miss the optimum:
// the optimum needs one layer cheaper and another dearer at once. Selection must be exact.
TEST(Selection, ExactWhereTheRelaxationMissesTheOptimum) {
  // Max error 0.35 (error sum 0.7). The hull point is (dense, y): error 0.05, cost 0.85; from it
  // no single change both saves cost and keeps the bound (x on layer 0 alone: error 0.4).
  // The optimum is (x, dense): error 0.35, cost 0.6.
  {
    std::vector<Record> rs{quality(0, {8, 75, 2}, 0.7, 0.2), quality(1, {10, 150, 2}, 0.1, 0.7)};
    const auto p = select_per_layer_max_error(build_quality_table(rs, 2), 0.35);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->layers[0].c, (Candidate{8, 75, 2}));
    EXPECT_TRUE(p->layers[1].c.dense);
    EXPECT_DOUBLE_EQ(p->cost2, 0.6);
    EXPECT_DOUBLE_EQ(p->error, 0.35);
  }
  // Max cost 0.7 (cost sum 1.4). The relaxation gives (b, y): cost 0.6, error 0.5; the optimum
  // is (a, dense): cost 0.7, error 0.45 (layer 0 cheaper and worse, layer 1 dearer and exact).
  {
    std::vector<Record> rs{quality(0, {10, 150, 2}, 0.9, 0.4), quality(0, {8, 150, 2}, 0.3, 0.5),
                           quality(1, {10, 150, 2}, 0.7, 0.7)};
    const auto p = select_per_layer_max_cost(build_quality_table(rs, 2), 0.7);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->layers[0].c, (Candidate{10, 150, 2}));
    EXPECT_TRUE(p->layers[1].c.dense);
    EXPECT_DOUBLE_EQ(p->cost2, 0.7);
    EXPECT_DOUBLE_EQ(p->error, 0.45);
  }
  // Many layers of the first kind: 12 layers with x = (0.7, 0.2), 12 with y = (0.1, 0.7). A
  // point is fixed by how many layers of each kind are not dense (k, j): the optimum over those
  // counts, against a search over 2^24 combinations.
  {
    std::vector<Record> rs;
    for (int l = 0; l < 24; ++l)
      rs.push_back(l % 2 ? quality(l, {10, 150, 2}, 0.1, 0.7) : quality(l, {8, 75, 2}, 0.7, 0.2));
    const double bound = 0.35;
    double want = 1e300;
    for (int k = 0; k <= 12; ++k)
      for (int j = 0; j <= 12; ++j)
        if ((0.7 * k + 0.1 * j) / 24 <= bound + 1e-12)
          want = std::min(want, (0.2 * k + 0.7 * j + (24 - k - j)) / 24);
    const auto p = select_per_layer_max_error(build_quality_table(rs, 24), bound);
    ASSERT_TRUE(p.has_value());
    EXPECT_LE(p->error, bound);
    EXPECT_NEAR(p->cost2, want, 1e-12);
    EXPECT_NEAR(want, 12.4 / 24, 1e-12); // k = 10, j = 12
  }
}

TEST(Selection, TiesGoToFewerProjectionsThenRecordOrder) {
  // Two candidates of equal error and cost on one layer: the one with fewer K * L wins, then
  // the first seen; never a later, equally good one.
  std::vector<Record> rs{quality(0, {10, 150, 2}, 0.1, 0.02), quality(0, {8, 100, 2}, 0.1, 0.02),
                         quality(0, {4, 150, 2}, 0.1, 0.02)};
  const auto p = select_per_layer_max_error(build_quality_table(rs, 1), 0.2);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->layers[0].c, (Candidate{4, 150, 2})); // 600 < 800 < 1500 projections
  rs = {quality(0, {10, 80, 2}, 0.1, 0.02), quality(0, {8, 100, 2}, 0.1, 0.02)};
  EXPECT_EQ(select_per_layer_max_error(build_quality_table(rs, 1), 0.2)->layers[0].c,
            (Candidate{10, 80, 2})); // 800 == 800: the first seen
}

TEST(Selection, DenseOnlyWhenAllowedAndNeeded) {
  std::vector<Record> rs{quality(0, {8, 75, 2}, 0.3, 0.02), quality(1, {8, 75, 2}, 0.05, 0.02)};
  const QualityTable t = build_quality_table(rs, 2);
  const auto p = select_per_layer_max_error(t, 0.1);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->layers[0].c.dense); // the hard layer goes dense
  EXPECT_FALSE(p->layers[1].c.dense);
  EXPECT_FALSE(select_per_layer_max_error(t, 0.1, /*allow_dense=*/false).has_value());
  const auto u = uniform_point(t, {8, 75, 2}, {});
  ASSERT_TRUE(u.has_value());
  EXPECT_DOUBLE_EQ(u->error, 0.175);
  EXPECT_FALSE(uniform_point(t, {9, 75, 2}, {}).has_value());
}

TEST(Selection, MeasuredLayerTimesReplaceCost2) {
  // On cost2, dense (1.0) is far dearer than (8, 75) on either layer; on this machine's measured
  // times a dense layer costs only 3x a sparse one, so the hard layer goes dense at a bound that
  // cost2 would meet with LSH; a candidate without a time is not chosen; no dense time: no dense.
  std::vector<Record> rs{quality(0, {8, 75, 2}, 0.3, 0.02), quality(0, {10, 150, 2}, 0.12, 0.3),
                         quality(1, {8, 75, 2}, 0.05, 0.02), quality(1, {10, 150, 2}, 0.04, 0.03)};
  const QualityTable t = build_quality_table(rs, 2);
  const auto on_cost2 = select_per_layer_max_error(t, 0.1);
  ASSERT_TRUE(on_cost2.has_value());
  EXPECT_EQ(on_cost2->layers[0].c, (Candidate{10, 150, 2}));
  EXPECT_EQ(on_cost2->attention_s, 0.0);
  const QualityTable timed = with_layer_times(t, {{0, {8, 75, 2}, 1e-3},
                                                  {0, {10, 150, 2}, 4e-3},
                                                  {0, {{0, 0, 0}, true}, 3e-3},
                                                  {1, {8, 75, 2}, 1e-3}});
  ASSERT_EQ(timed.layers[1].candidates.size(), 1u); // (10, 150) has no time on layer 1
  const auto on_time = select_per_layer_max_error(timed, 0.1);
  ASSERT_TRUE(on_time.has_value());
  EXPECT_TRUE(on_time->layers[0].c.dense);
  EXPECT_EQ(on_time->layers[1].c, (Candidate{8, 75, 2}));
  EXPECT_DOUBLE_EQ(on_time->attention_s, 4e-3);
  EXPECT_DOUBLE_EQ(on_time->cost2, (1.0 + 0.02) / 2); // still reported in cost2
  // Layer 1 has no dense time: the most accurate it can reach is (8, 75), so 0.02 is out of reach.
  EXPECT_FALSE(select_per_layer_max_error(timed, 0.02).has_value());
}

} // namespace
