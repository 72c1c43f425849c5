// The eval library's parts that wrap the runtime: the query-capturing decorator, and the
// workflows' errors (exceptions the tool maps to its exit status, never an exit).
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

#include "../runtime/model_util.h" // PIG_REQUIRE_MODEL
#include "pig/eval/capturing_attention.h"
#include "pig/eval/run.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/ops.h"
#include "pig/runtime/thread_pool.h"

namespace {

using namespace pig::runtime;
using pig::eval::CapturingAttention;

AttentionShape Shape() {
  AttentionShape s;
  s.n_layers = 3;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.capacity = 8;
  return s;
}

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float &x : v)
    x = d(g);
  return v;
}

// Captures exactly the armed single-token steps of the chosen layers, and attends as dense does.
TEST(CapturingAttention, KeepsArmedDecodeQueriesOfChosenLayersAndAttendsAsDense) {
  const AttentionShape s = Shape();
  const size_t qn = s.n_heads * s.head_dim, kn = s.n_kv_heads * s.head_dim;
  ThreadPool pool(1);
  CapturingAttention cap(s, lsh::DType::f32, {1});
  DenseAttention dense(s, lsh::DType::f32);
  // A 2-token prefill of every layer, armed: not a decode step, nothing kept.
  const std::vector<float> q2 = Random(2 * qn, 1), k2 = Random(2 * kn, 2), v2 = Random(2 * kn, 3);
  std::vector<float> out_cap(2 * qn), out_dense(2 * qn);
  cap.Arm(true);
  for (size_t layer = 0; layer < s.n_layers; ++layer) {
    cap.Forward(layer, 0, 2, q2.data(), k2.data(), v2.data(), out_cap.data(), pool);
    dense.Forward(layer, 0, 2, q2.data(), k2.data(), v2.data(), out_dense.data(), pool);
    EXPECT_EQ(out_cap, out_dense);
  }
  EXPECT_TRUE(cap.query(1).empty());
  // Decode step at position 2, armed: layer 1 keeps its queries, layers 0 and 2 do not.
  const std::vector<float> q = Random(qn, 4), k = Random(kn, 5), v = Random(kn, 6);
  std::vector<float> o1(qn), o2(qn);
  for (size_t layer = 0; layer < s.n_layers; ++layer) {
    cap.Forward(layer, 2, 1, q.data(), k.data(), v.data(), o1.data(), pool);
    dense.Forward(layer, 2, 1, q.data(), k.data(), v.data(), o2.data(), pool);
    EXPECT_EQ(o1, o2);
  }
  EXPECT_EQ(cap.query(1), q);
  EXPECT_TRUE(cap.query(0).empty());
  EXPECT_TRUE(cap.query(2).empty());
  // Disarmed: the next decode step leaves the captured queries as they were.
  cap.Arm(false);
  const std::vector<float> q3 = Random(qn, 7);
  cap.Forward(1, 3, 1, q3.data(), k.data(), v.data(), o1.data(), pool);
  EXPECT_EQ(cap.query(1), q);
}

// A model that cannot be read is an exception from every workflow (pig-eval: exit 1), not an
// exit of the process.
TEST(EvalRun, MissingModelThrows) {
  pig::eval::EvalOptions e;
  e.model = "/nonexistent.gguf";
  e.out = ::testing::TempDir() + "/pig-eval-missing-model";
  EXPECT_THROW(pig::eval::RunAttentionError(e, {}), std::runtime_error);
  EXPECT_THROW(pig::eval::RunDownstream(e, {}), std::runtime_error);
  EXPECT_THROW(pig::eval::RunAll(e, {}, {}), std::runtime_error);
  EXPECT_THROW(pig::eval::RunKvFormats(e, {}), std::runtime_error);
}

// What only the loaded model refuses is a UsageError (pig-eval: exit 2 with the usage).
TEST(EvalRun, LayerOutsideTheModelIsAUsageError) {
  PIG_REQUIRE_MODEL();
  pig::eval::EvalOptions e;
  e.out = ::testing::TempDir() + "/pig-eval-usage";
  e.layers = {99};
  try {
    pig::eval::RunDownstream(e, {});
    FAIL() << "no exception";
  } catch (const pig::eval::UsageError &err) {
    EXPECT_STREQ(err.what(), "--layers: layer 99 outside the model's 30");
  }
}

} // namespace
