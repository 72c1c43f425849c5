// app's attention decorators: CapturingAttention (pig-eval's and pig-tune accuracy's decode
// queries) and TimedAttention (pig-tune speed's per-layer times, the tiled-context decoder).
// Both must attend exactly as the attention they wrap.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "pig/app/decorators.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/ops.h"
#include "pig/runtime/thread_pool.h"

namespace {

using namespace pig::runtime;
using pig::app::CapturingAttention;
using pig::app::TimedAttention;

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

// One Forward call (the one place that spells its arguments).
void Step(Attention &a, size_t layer, size_t pos, size_t n, const std::vector<float> &q,
          const std::vector<float> &k, const std::vector<float> &v, std::vector<float> &out) {
  static ThreadPool pool(1);
  a.Forward(layer, pos, n, q.data(), k.data(), v.data(), out.data(), pool);
}

std::unique_ptr<Attention> Dense(const AttentionShape &s) {
  return std::make_unique<DenseAttention>(s, lsh::DType::f32);
}

// Captures exactly the armed single-token steps of the chosen layers, and attends as dense does.
TEST(CapturingAttention, KeepsArmedDecodeQueriesOfChosenLayersAndAttendsAsDense) {
  const AttentionShape s = Shape();
  const size_t qn = s.n_heads * s.head_dim, kn = s.n_kv_heads * s.head_dim;
  CapturingAttention cap(Dense(s), {1});
  DenseAttention dense(s, lsh::DType::f32);
  // A 2-token prefill of every layer, armed: not a decode step, nothing kept.
  const std::vector<float> q2 = Random(2 * qn, 1), k2 = Random(2 * kn, 2), v2 = Random(2 * kn, 3);
  std::vector<float> out_cap(2 * qn), out_dense(2 * qn);
  cap.Arm(true);
  for (size_t layer = 0; layer < s.n_layers; ++layer) {
    Step(cap, layer, 0, 2, q2, k2, v2, out_cap);
    Step(dense, layer, 0, 2, q2, k2, v2, out_dense);
    EXPECT_EQ(out_cap, out_dense);
  }
  EXPECT_TRUE(cap.query(1).empty());
  // Decode step at position 2, armed: layer 1 keeps its queries, layers 0 and 2 do not.
  const std::vector<float> q = Random(qn, 4), k = Random(kn, 5), v = Random(kn, 6);
  std::vector<float> o1(qn), o2(qn);
  for (size_t layer = 0; layer < s.n_layers; ++layer) {
    Step(cap, layer, 2, 1, q, k, v, o1);
    Step(dense, layer, 2, 1, q, k, v, o2);
    EXPECT_EQ(o1, o2);
  }
  EXPECT_EQ(cap.query(1), q);
  EXPECT_TRUE(cap.query(0).empty());
  EXPECT_TRUE(cap.query(2).empty());
  // Disarmed: the next decode step leaves the captured queries as they were.
  cap.Arm(false);
  const std::vector<float> q3 = Random(qn, 7);
  Step(cap, 1, 3, 1, q3, k, v, o1);
  EXPECT_EQ(cap.query(1), q);
  ASSERT_EQ(cap.queries(1).size(), 1u);
  EXPECT_EQ(cap.queries(1)[0].pos, 2u);
}

// Without chosen layers (pig-tune accuracy): every layer's decode steps, armed from the start,
// each with its position, in call order; query() is the last one.
TEST(CapturingAttention, EveryLayerKeepsEveryDecodeStepWithItsPosition) {
  const AttentionShape s = Shape();
  const size_t qn = s.n_heads * s.head_dim, kn = s.n_kv_heads * s.head_dim;
  CapturingAttention cap(Dense(s));
  const std::vector<float> k = Random(kn, 8), v = Random(kn, 9);
  std::vector<float> out(qn);
  std::vector<std::vector<float>> qs;
  for (size_t pos = 0; pos < 3; ++pos) {
    qs.push_back(Random(qn, 10 + unsigned(pos)));
    for (size_t layer = 0; layer < s.n_layers; ++layer)
      Step(cap, layer, pos, 1, qs.back(), k, v, out);
  }
  for (size_t layer = 0; layer < s.n_layers; ++layer) {
    ASSERT_EQ(cap.queries(layer).size(), 3u);
    for (size_t pos = 0; pos < 3; ++pos) {
      EXPECT_EQ(cap.queries(layer)[pos].pos, pos);
      EXPECT_EQ(cap.queries(layer)[pos].q, qs[pos]);
    }
    EXPECT_EQ(cap.query(layer), qs.back());
  }
}

// An attention that takes at least `sleep` per call (to time).
class Slow final : public ForwardingAttention {
public:
  explicit Slow(std::unique_ptr<Attention> inner) : ForwardingAttention(std::move(inner)) {}
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, ThreadPool &pool) override {
    std::this_thread::sleep_for(sleep);
    ForwardingAttention::Forward(layer, pos, n, q, k, v, out, pool);
  }
  std::chrono::milliseconds sleep{0};
};

// seconds sums every call; layer_seconds holds each layer's last call only; the output is the
// wrapped attention's.
TEST(TimedAttention, SumsEveryCallAndKeepsEachLayersLast) {
  const AttentionShape s = Shape();
  const size_t qn = s.n_heads * s.head_dim, kn = s.n_kv_heads * s.head_dim;
  auto slow = std::make_unique<Slow>(Dense(s));
  Slow &slow_ref = *slow;
  TimedAttention timed(std::move(slow));
  DenseAttention dense(s, lsh::DType::f32);
  ASSERT_EQ(timed.layer_seconds.size(), s.n_layers);
  const std::vector<float> q = Random(qn, 20), k = Random(kn, 21), v = Random(kn, 22);
  std::vector<float> o1(qn), o2(qn);
  slow_ref.sleep = std::chrono::milliseconds(40);
  Step(timed, 1, 0, 1, q, k, v, o1);
  Step(dense, 1, 0, 1, q, k, v, o2);
  EXPECT_EQ(o1, o2);
  const double first = timed.seconds;
  EXPECT_GE(first, 0.04);
  EXPECT_DOUBLE_EQ(timed.layer_seconds[1], first);
  slow_ref.sleep = std::chrono::milliseconds(0);
  Step(timed, 1, 1, 1, q, k, v, o1);
  EXPECT_GT(timed.seconds, first);
  EXPECT_NEAR(timed.layer_seconds[1], timed.seconds - first, 1e-12); // the last call's alone
  EXPECT_EQ(timed.layer_seconds[0], 0.0);
  EXPECT_EQ(timed.layer_seconds[2], 0.0);
}

} // namespace
