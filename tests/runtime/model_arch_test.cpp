// What the architectures beyond Llama add to the runtime, without a model or transformers:
// sliding windows and soft-capped logits in dense attention (against pig::ref and a scalar
// oracle), the sparse methods' refusal of both, and the loader's refusals, each naming its key.
// (arch_parity_test.cpp holds every architecture against transformers.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "pig/reference/reference.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/lsh_attention.h"
#include "pig/runtime/model.h"

namespace {

using namespace pig::runtime;
namespace ref = pig::ref;

// Softmax attention of one head over rows [begin, end), logits capped as c tanh(s / c) when
// cap > 0: the oracle of soft-capping (pig::ref has none), in double.
std::vector<double> Oracle(const float *q, const std::vector<float> &k, const std::vector<float> &v,
                           size_t kvh, size_t H, size_t d, size_t begin, size_t end, double cap) {
  std::vector<double> s(end - begin), out(d, 0.0);
  double mx = -INFINITY, sum = 0;
  for (size_t j = begin; j < end; ++j) {
    double dot = 0;
    for (size_t e = 0; e < d; ++e)
      dot += double(q[e]) * double(k[(j * H + kvh) * d + e]);
    dot /= std::sqrt(double(d));
    s[j - begin] = cap > 0 ? cap * std::tanh(dot / cap) : dot;
    mx = std::max(mx, s[j - begin]);
  }
  for (size_t j = begin; j < end; ++j) {
    const double p = std::exp(s[j - begin] - mx);
    sum += p;
    for (size_t e = 0; e < d; ++e)
      out[e] += p * double(v[(j * H + kvh) * d + e]);
  }
  for (double &x : out)
    x /= sum;
  return out;
}

struct WindowCase {
  const char *name;
  std::vector<std::uint32_t> windows; // per layer
  float softcap;
  size_t n; // positions
};

// Layer 0 global, layer 1 windowed: prefill rows and a decode row attend [p + 1 - w, p]. The
// first case's n and window are past DenseDecodeSplit's split (2 x 2048 positions), so the decode
// row's window is split in parts and merged; soft-capping runs scalar (one part), on fewer
// positions. Keys are scaled so that attention is peaked and soft-capping bites.
TEST(DenseAttentionWindows, PrefillAndDecodeAttendTheWindowOnly) {
  const size_t heads = 4, H = 2, d = 32;
  for (const WindowCase &c :
       {WindowCase{"window", {0, 4300}, 0.0f, 4700}, WindowCase{"short window", {0, 16}, 0.0f, 300},
        WindowCase{"softcap", {0, 0}, 3.0f, 300},
        WindowCase{"window and softcap", {0, 100}, 3.0f, 300}}) {
    SCOPED_TRACE(c.name);
    const size_t n = c.n;
    AttentionShape shape{2, heads, H, d, n};
    shape.windows = c.windows;
    shape.softcap = c.softcap;
    DenseAttention attn(shape, lsh::DType::f32);
    ThreadPool pool(2);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> k(n * H * d), v(k.size()), q(n * heads * d), out(q.size());
    for (auto &x : k)
      x = 2.0f * nd(rng);
    for (auto &x : v)
      x = nd(rng);
    for (auto &x : q)
      x = nd(rng);
    for (size_t l = 0; l < 2; ++l) {
      attn.Forward(l, 0, n - 1, q.data(), k.data(), v.data(), out.data(), pool);
      // Prefill rows: the first, one at the window's edge, the last.
      for (size_t p : {size_t(0), size_t(c.windows[l] ? c.windows[l] : 1), n - 2})
        for (size_t h = 0; h < heads; ++h) {
          const size_t begin = shape.Begin(l, p + 1);
          const auto e =
              Oracle(&q[(p * heads + h) * d], k, v, h / 2, H, d, begin, p + 1, c.softcap);
          for (size_t j = 0; j < d; ++j)
            ASSERT_NEAR(out[(p * heads + h) * d + j], e[j], 2e-5) << "layer " << l << " row " << p;
        }
      // The decode row (DenseDecodeSplit's parts).
      std::vector<float> row(heads * d);
      attn.Forward(l, n - 1, 1, &q[(n - 1) * heads * d], &k[(n - 1) * H * d], &v[(n - 1) * H * d],
                   row.data(), pool);
      for (size_t h = 0; h < heads; ++h) {
        const size_t begin = shape.Begin(l, n);
        EXPECT_EQ(begin, c.windows[l] ? n - c.windows[l] : 0);
        const auto e =
            Oracle(&q[((n - 1) * heads + h) * d], k, v, h / 2, H, d, begin, n, c.softcap);
        for (size_t j = 0; j < d; ++j)
          ASSERT_NEAR(row[h * d + j], e[j], 2e-5) << "layer " << l << ", decode";
      }
    }
  }
}

// The sparse methods refuse soft-capped logits, naming them; dense takes them.
TEST(DenseAttentionWindows, SparseMethodsRefuseSoftcap) {
  AttentionShape shape{2, 4, 2, 64, 256};
  shape.softcap = 50.0f;
  for (pig::spec::Method m : {pig::spec::Method::magicpig, pig::spec::Method::topk,
                              pig::spec::Method::quest, pig::spec::Method::lsh_hybrid}) {
    AttentionSpec spec;
    spec.method = m;
    try {
      MakeAttention(spec, shape);
      ADD_FAILURE() << pig::spec::name(m) << " took soft-capped logits";
    } catch (const std::invalid_argument &e) {
      EXPECT_NE(std::string(e.what()).find("soft-capped"), std::string::npos) << e.what();
    }
  }
  AttentionSpec dense;
  dense.method = pig::spec::Method::dense;
  EXPECT_NO_THROW(MakeAttention(dense, shape));
}

// A sparse method on a model with local layers: those stay exact and windowed (the dense
// method's output bit for bit, no index built), the global layer samples.
TEST(DenseAttentionWindows, SparseMethodsKeepLocalLayersExactAndWindowed) {
  const size_t heads = 4, H = 2, d = 64, n = 700, W = 64;
  AttentionShape shape{2, heads, H, d, n + 1};
  shape.windows = {W, 0};
  for (pig::spec::Method m : {pig::spec::Method::magicpig, pig::spec::Method::topk}) {
    SCOPED_TRACE(pig::spec::name(m));
    AttentionSpec spec;
    spec.method = m;
    spec.dense_layers_set = true; // no dense layer asked for: layer 0 is dense for its window
    spec.dense_below = 0;
    std::unique_ptr<Attention> sparse = MakeAttention(spec, shape);
    DenseAttention dense(shape);
    ThreadPool pool(2);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> k((n + 1) * H * d), v(k.size()), q((n + 1) * heads * d), a(q.size()),
        b(q.size());
    for (auto *x : {&k, &v, &q})
      for (float &e : *x)
        e = nd(rng);
    for (size_t l = 0; l < 2; ++l) {
      sparse->Forward(l, 0, n, q.data(), k.data(), v.data(), a.data(), pool);
      dense.Forward(l, 0, n, q.data(), k.data(), v.data(), b.data(), pool);
      ASSERT_EQ(a, b) << "prefill, layer " << l;
      const size_t qo = n * heads * d, ko = n * H * d;
      sparse->Forward(l, n, 1, &q[qo], &k[ko], &v[ko], a.data(), pool);
      dense.Forward(l, n, 1, &q[qo], &k[ko], &v[ko], b.data(), pool);
      const bool same = std::equal(a.begin(), a.begin() + heads * d, b.begin());
      if (l == 0)
        EXPECT_TRUE(same) << "the local layer's decode row differs from dense's";
      else
        EXPECT_FALSE(same) << "the global layer's decode row was not sampled";
    }
    if (m == pig::spec::Method::magicpig) {
      const auto &lsh = dynamic_cast<const LshAttention &>(*sparse);
      EXPECT_EQ(lsh.index(0, 0), nullptr);
      EXPECT_NE(lsh.index(1, 0), nullptr);
    }
  }
}

// A GGUF file with an architecture's metadata and no tensors: the loader refuses before it reads
// any (the refusals come first).
std::string Write(const std::string &name, const std::string &arch,
                  const std::function<void(pig::runtime::testing::GgufWriter &)> &extra) {
  pig::runtime::testing::GgufWriter w;
  w.Str("general.architecture", arch);
  w.U32(arch + ".block_count", 1);
  w.U32(arch + ".embedding_length", 64);
  w.U32(arch + ".feed_forward_length", 128);
  w.U32(arch + ".attention.head_count", 2);
  extra(w);
  const auto bytes = w.Finish();
  const auto path = (std::filesystem::path(::testing::TempDir()) / name).string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
  return path;
}

void ExpectRefused(const std::string &path, const std::vector<std::string> &needles) {
  try {
    LlamaModel::Load(path);
    ADD_FAILURE() << path << " loaded";
  } catch (const GgufError &e) {
    for (const std::string &s : needles)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(ModelLoad, RefusesWhatItDoesNotServeNamingTheKey) {
  using W = pig::runtime::testing::GgufWriter;
  ExpectRefused(Write("mamba.gguf", "mamba", [](W &) {}),
                {"'mamba'", "general.architecture", "gemma3"});
  ExpectRefused(Write("moe.gguf", "qwen3", [](W &w) { w.U32("qwen3.expert_count", 8); }),
                {"qwen3.expert_count", "mixture of experts"});
  ExpectRefused(
      Write("longrope.gguf", "llama", [](W &w) { w.Str("llama.rope.scaling.type", "longrope"); }),
      {"'longrope'", "llama.rope.scaling.type"});
  ExpectRefused(Write("yarn0.gguf", "qwen2",
                      [](W &w) {
                        w.Str("qwen2.rope.scaling.type", "yarn");
                        w.F32("qwen2.rope.scaling.factor", -4.0f);
                      }),
                {"qwen2.rope.scaling.factor"});
  ExpectRefused(
      Write("attnf.gguf", "qwen2", [](W &w) { w.F32("qwen2.rope.scaling.attn_factor", 0.5f); }),
      {"qwen2.rope.scaling.attn_factor"});
  ExpectRefused(Write("vlen.gguf", "gemma2",
                      [](W &w) {
                        w.U32("gemma2.attention.key_length", 32);
                        w.U32("gemma2.attention.value_length", 64);
                      }),
                {"gemma2.attention.value_length"});
  ExpectRefused(Write("longrope_phi3.gguf", "phi3",
                      [](W &w) {
                        w.Tensor("rope_factors_long.weight", 0, {16},
                                 std::vector<uint8_t>(16 * 4, 0));
                      }),
                {"LongRoPE", "rope_factors_long.weight"});
  ExpectRefused(
      Write("heads.gguf", "llama", [](W &w) { w.U32("llama.attention.head_count_kv", 3); }),
      {"head_count_kv"});
}

} // namespace
