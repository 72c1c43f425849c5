// LshAttention (MagicPIG decoding in the runtime) against pig::ref: prefill, index build at the
// first decode step, incremental indexing as the local window slides (including the merge of the
// tail into the tables), dense layers, GQA groups, statistics and error paths. Synthetic shapes,
// no model: fast enough for the sanitizer build.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

#include "pig/reference/reference.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/lsh_attention.h"

namespace {

using namespace pig::runtime;
namespace ref = pig::ref;

float Bf16Round(float x, lsh::DType dt) {
  if (dt == lsh::DType::f32)
    return x;
  std::uint16_t b;
  lsh::convert_to_bf16(&x, &b, 1);
  float y;
  lsh::convert_from_bf16(&b, &y, 1);
  return y;
}

struct Case {
  const char *name;
  size_t prompt;    // prefill length
  size_t steps;     // decode steps
  double key_scale; // multiplies every key (huge norms)
  bool equal_keys;  // every key the same row
  lsh::DType dtype;
  size_t kv_heads = 2; // 3 on the test's 2 threads: each group's sampled pass is split in two
  int parts = 0;       // the schedule's parts knob (0: automatic)
  int r = 0;           // multi-probe radius
};

// Rows of keys in a cone (a common offset plus noise), like a real model's keys.
struct Stream {
  std::mt19937 rng{7};
  std::normal_distribution<float> nd{0.0f, 1.0f};
  std::vector<float> offset;
  explicit Stream(size_t d) : offset(d) {
    for (auto &x : offset)
      x = 2.0f * nd(rng);
  }
  void Keys(float *k, size_t count, const Case &c) {
    for (size_t i = 0; i < count; ++i)
      k[i] = c.equal_keys ? float(c.key_scale) * offset[i % offset.size()]
                          : float(c.key_scale) * (offset[i % offset.size()] + nd(rng));
  }
  void Fill(float *x, size_t count, float s = 1.0f) {
    for (size_t i = 0; i < count; ++i)
      x[i] = s * nd(rng);
  }
};

class LshAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(LshAttentionTest, MatchesReferenceThroughIncrementalIndexing) {
  const Case c = GetParam();
  const size_t layers = 2, kvh = c.kv_heads, heads = 3 * kvh, d = 64, G = heads / kvh;
  const size_t cap = c.prompt + c.steps;
  AttentionSpec spec;
  spec.method = pig::spec::Method::magicpig;
  spec.K = 8;
  spec.L = 75;
  spec.kv_dtype = c.dtype;
  spec.dense_layers = {0};
  spec.dense_layers_set = true;
  spec.schedule.parts = c.parts;
  spec.r = c.r;
  const AttentionShape shape{layers, heads, kvh, d, cap};
  LshAttention attn(spec, shape);
  ThreadPool pool(2);
  const ref::OwnedMatrix W = ref::simhash_matrix(spec.seed, d, spec.K, spec.L);
  const ref::LshConfig cfg{spec.K, spec.L, spec.t, spec.seed, spec.r};

  Stream s(d);
  // What the cache holds, as the reference sees it (rounded to the cache's element type).
  std::vector<ref::OwnedMatrix> K(layers * kvh, ref::OwnedMatrix(cap, d)),
      V(layers * kvh, ref::OwnedMatrix(cap, d));
  auto append = [&](size_t pos, size_t n, std::vector<float> &k, std::vector<float> &v) {
    k.resize(n * kvh * d);
    v.resize(n * kvh * d);
    s.Keys(k.data(), k.size(), c);
    s.Fill(v.data(), v.size());
    for (size_t l = 0; l < layers; ++l)
      for (size_t i = 0; i < n; ++i)
        for (size_t h = 0; h < kvh; ++h)
          for (size_t j = 0; j < d; ++j) {
            K[l * kvh + h].at(pos + i, j) = Bf16Round(k[(i * kvh + h) * d + j], c.dtype);
            V[l * kvh + h].at(pos + i, j) = Bf16Round(v[(i * kvh + h) * d + j], c.dtype);
          }
  };

  std::vector<float> k, v, q(c.prompt * heads * d), out(c.prompt * heads * d);
  append(0, c.prompt, k, v);
  s.Fill(q.data(), q.size(), 0.3f);
  for (size_t l = 0; l < layers; ++l)
    attn.Forward(l, 0, c.prompt, q.data(), k.data(), v.data(), out.data(), pool);
  // Prefill is dense and causal: spot-check the last query of the sparse layer.
  for (size_t h = 0; h < heads; ++h) {
    const size_t n = c.prompt;
    const ref::Attention e = ref::dense_attention({&q[((n - 1) * heads + h) * d], d},
                                                  ref::Matrix{K[kvh + h / G].data.data(), n, d},
                                                  ref::Matrix{V[kvh + h / G].data.data(), n, d});
    for (size_t j = 0; j < d; ++j)
      ASSERT_NEAR(out[((n - 1) * heads + h) * d + j], e.out[j], 2e-5) << c.name << " prefill";
  }

  // Reference codes, extended token by token like the runtime's index.
  std::vector<std::vector<float>> mean(kvh);
  std::vector<std::vector<std::uint16_t>> codes(kvh);
  size_t coded = 0; // indexed tokens encoded so far (absolute end position)
  bool built = false;
  double sampled = 0;
  q.resize(heads * d);
  out.resize(heads * d);
  for (size_t step = 0; step < c.steps; ++step) {
    const size_t pos = c.prompt + step, n = pos + 1;
    append(pos, 1, k, v);
    s.Fill(q.data(), q.size(), 0.3f);
    for (size_t l = 0; l < layers; ++l) {
      const AttentionStats before = attn.stats();
      attn.Forward(l, pos, 1, q.data(), k.data(), v.data(), out.data(), pool);
      const AttentionStats after = attn.stats();
      const bool sparse = l == 1;
      const size_t indexable = n > spec.sink + spec.local ? n - spec.sink - spec.local : 0;
      const bool lsh_step = sparse && (built || indexable >= LshAttention::kMinIndexed);
      if (lsh_step && !built) {
        // Built over the positions cached before this step (the prompt and earlier steps' tokens:
        // n - 1), then extended by this step's token like every later step.
        built = true;
        for (size_t h = 0; h < kvh; ++h) {
          mean[h] = ref::mean_of_rows(ref::Matrix{K[kvh + h].data.data(), n - 1, d}, spec.sink,
                                      n - 1 - spec.local);
          EXPECT_EQ(attn.index(1, h)->mean(), mean[h]) << c.name;
        }
        coded = spec.sink;
      }
      if (lsh_step) {
        for (size_t h = 0; h < kvh; ++h) {
          for (size_t i = coded; i < n - spec.local; ++i) {
            std::vector<float> cent(d);
            for (size_t j = 0; j < d; ++j)
              cent[j] = K[kvh + h].at(i, j) - mean[h][j];
            const auto cc = ref::encode(cent, W.view(), cfg);
            codes[h].insert(codes[h].end(), cc.begin(), cc.end());
          }
          ASSERT_EQ(attn.index(1, h)->count(), n - spec.sink - spec.local) << c.name;
        }
        coded = n - spec.local;
      }
      // Check every few steps (and the last) against the reference.
      if (step % 29 != 0 && step + 1 != c.steps)
        continue;
      double step_sampled = 0, step_indexed = 0;
      std::vector<std::vector<size_t>> group_union(kvh); // per kv-head: its heads' sample sets
      for (size_t h = 0; h < heads; ++h) {
        const size_t g = l * kvh + h / G;
        const ref::Matrix Km{K[g].data.data(), n, d}, Vm{V[g].data.data(), n, d};
        const std::span<const float> qh{&q[h * d], d};
        std::vector<float> expect;
        if (!lsh_step) {
          expect = ref::dense_attention(qh, Km, Vm).out;
        } else {
          ref::LshIndex ix;
          ix.cfg = cfg;
          ix.split = ref::split_tokens(n, ref::StaticConfig{spec.sink, spec.local});
          ix.mean = mean[h / G];
          ix.codes = codes[h / G];
          ix.centered = ref::OwnedMatrix(ix.split.indexed(), d);
          for (size_t i = 0; i < ix.split.indexed(); ++i)
            for (size_t j = 0; j < d; ++j)
              ix.centered.at(i, j) = Km.row(ix.split.indexed_begin + i)[j] - ix.mean[j];
          const ref::MagicPigResult r = ref::magicpig_attention(qh, Km, Vm, W.view(), ix);
          expect = r.attention.out;
          step_sampled += double(r.sample.size());
          step_indexed += double(r.indexed);
          group_union[h / G].insert(group_union[h / G].end(), r.sample.begin(), r.sample.end());
        }
        for (size_t j = 0; j < d; ++j) {
          const double tol = 2e-4 * (1.0 + std::fabs(expect[j]));
          ASSERT_NEAR(out[h * d + j], expect[j], tol)
              << c.name << " step " << step << " layer " << l << " head " << h << " dim " << j;
        }
      }
      // The statistics count exactly the reference's sample sets and indexed tokens.
      EXPECT_EQ(after.sampled - before.sampled, step_sampled) << c.name << " step " << step;
      EXPECT_EQ(after.indexed - before.indexed, step_indexed) << c.name << " step " << step;
      double step_gathered = 0; // the union of each group's sets: rows its shared gather reads
      for (auto &u : group_union) {
        std::sort(u.begin(), u.end());
        step_gathered += double(std::unique(u.begin(), u.end()) - u.begin());
      }
      EXPECT_EQ(after.gathered - before.gathered, step_gathered) << c.name << " step " << step;
      sampled += step_sampled;
    }
  }
  ASSERT_TRUE(built) << c.name;
  const AttentionStats st = attn.stats();
  EXPECT_EQ(st.decode_steps, c.steps);
  EXPECT_GT(st.index_bytes, 0u);
  EXPECT_LE(st.cost2(), 1.0);
  if (sampled > 0) {
    EXPECT_GT(st.cost2(), 0.0);
    // Between identical sets (1/G) and disjoint ones (1).
    EXPECT_GE(st.gather_ratio(), 1.0 / double(G) - 1e-12);
    EXPECT_LE(st.gather_ratio(), 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LshAttentionTest,
    ::testing::Values(
        // Crosses the tail limit (256): the tail is merged into the tables mid-decode.
        Case{"bf16", 300, 300, 1.0, false, lsh::DType::bf16},
        Case{"f32", 200, 80, 1.0, false, lsh::DType::f32},
        // Shorter than sink + local: dense until enough tokens left the window.
        Case{"tiny", 10, 100, 1.0, false, lsh::DType::bf16},
        Case{"huge_norms", 150, 40, 1e3, false, lsh::DType::bf16},
        Case{"equal_keys", 150, 40, 1.0, true, lsh::DType::bf16},
        // 3 kv-heads on 2 threads: the sampled passes run as two merged halves per group.
        Case{"split_bf16", 300, 60, 1.0, false, lsh::DType::bf16, 3},
        Case{"split_f32", 120, 40, 1.0, false, lsh::DType::f32, 3},
        Case{"split_equal_keys", 150, 20, 1.0, true, lsh::DType::bf16, 3},
        // The schedule's parts: whole passes, and more ranges than threads.
        Case{"parts1", 200, 30, 1.0, false, lsh::DType::bf16, 3, 1},
        Case{"parts3", 200, 30, 1.0, false, lsh::DType::bf16, 2, 3},
        Case{"parts8_f32", 120, 30, 1.0, false, lsh::DType::f32, 3, 8},
        // Multi-probe: buckets within r bits of the query's, u from q_r (across a tail merge).
        Case{"probe1", 300, 300, 1.0, false, lsh::DType::bf16, 2, 0, 1},
        Case{"probe2_split_f32", 150, 40, 1.0, false, lsh::DType::f32, 3, 0, 2},
        Case{"probe1_equal_keys", 150, 20, 1.0, true, lsh::DType::bf16, 2, 0, 1}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(LshAttention, InvalidSpecsThrowWithAMessage) {
  const AttentionShape shape{4, 6, 2, 64, 128};
  auto expect_throw = [&](AttentionSpec spec, const char *what) {
    try {
      MakeAttention(spec, shape);
      ADD_FAILURE() << "no exception for " << what;
    } catch (const std::invalid_argument &e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  AttentionSpec s;
  s.method = pig::spec::Method::magicpig;
  s.K = 0;
  expect_throw(s, "K must be in [1, 16]");
  s = {};
  EXPECT_FALSE(pig::spec::parse_method("sparse")); // a method is one of the enum's
  s = {};
  s.method = pig::spec::Method::magicpig;
  s.dense_layers = {7};
  s.dense_layers_set = true;
  expect_throw(s, "dense layer 7 outside");
  s = {};
  s.method = pig::spec::Method::topk;
  s.budget = 0;
  expect_throw(s, "budget must be in (0, 1]");
  s = {};
  s.method = pig::spec::Method::magicpig;
  s.t = 200;
  expect_throw(s, "t must be in");
  s = {};
  s.method = pig::spec::Method::magicpig;
  s.r = 4;
  expect_throw(s, "r must be in [0, 3]");
  s.K = 2;
  s.r = 2;
  expect_throw(s, "r must be in [0, 1]");
  s = {};
  s.method = pig::spec::Method::lsh_hybrid;
  s.r = 1;
  expect_throw(s, "applies to magicpig only");
  s = {};
  s.method = pig::spec::Method::magicpig;
  s.schedule.block = 20;
  expect_throw(s, "schedule knob 'block' = 20 is illegal");
  // A GQA group larger than the kernels take, and an odd head dim.
  s = {};
  s.method = pig::spec::Method::magicpig;
  EXPECT_THROW(MakeAttention(s, AttentionShape{2, 18, 1, 64, 64}), std::invalid_argument);
  EXPECT_THROW(MakeAttention(s, AttentionShape{2, 6, 2, 63, 64}), std::invalid_argument);
}

// A per-layer operating point (pig-tune): each layer decodes exactly as a uniform spec of its
// own choice would (same kernels, same W, same log u), whatever the other layers chose; layers
// that share a (K, L) share W, and a dense choice is dense attention.
TEST(LshAttention, PerLayerChoicesDecodeAsTheirUniformSpec) {
  const size_t layers = 4, heads = 6, kvh = 2, d = 64, prompt = 300, steps = 12;
  const AttentionShape shape{layers, heads, kvh, d, prompt + steps};
  std::vector<LayerLsh> choices{{{}, true}, {{8, 75, 2}}, {{10, 150, 1}}, {{8, 75, 1}}};
  AttentionSpec per;
  per.method = pig::spec::Method::magicpig;
  per.layers = choices;
  auto tuned = MakeAttention(per, shape);
  std::vector<std::unique_ptr<Attention>> uniform;
  for (const LayerLsh &c : choices) {
    AttentionSpec u;
    u.method = c.dense ? pig::spec::Method::dense : pig::spec::Method::magicpig;
    u.K = c.K;
    u.L = c.L;
    u.t = c.t;
    u.dense_layers_set = true; // no dense layer: the layer under test is sparse
    uniform.push_back(MakeAttention(u, shape));
  }
  ThreadPool pool(2);
  Stream s(d);
  Case c{"per-layer", prompt, steps, 1.0, false, lsh::DType::bf16};
  for (size_t layer = 0; layer < layers; ++layer) {
    std::vector<float> k(prompt * kvh * d), v(prompt * kvh * d), q(prompt * heads * d),
        a(prompt * heads * d), b(prompt * heads * d);
    s.Keys(k.data(), k.size(), c);
    s.Fill(v.data(), v.size());
    s.Fill(q.data(), q.size(), 0.3f);
    tuned->Forward(layer, 0, prompt, q.data(), k.data(), v.data(), a.data(), pool);
    uniform[layer]->Forward(layer, 0, prompt, q.data(), k.data(), v.data(), b.data(), pool);
  }
  for (size_t step = 0; step < steps; ++step)
    for (size_t layer = 0; layer < layers; ++layer) {
      std::vector<float> k(kvh * d), v(kvh * d), q(heads * d), a(heads * d), b(heads * d);
      s.Keys(k.data(), k.size(), c);
      s.Fill(v.data(), v.size());
      s.Fill(q.data(), q.size(), 0.3f);
      const size_t pos = prompt + step;
      tuned->Forward(layer, pos, 1, q.data(), k.data(), v.data(), a.data(), pool);
      uniform[layer]->Forward(layer, pos, 1, q.data(), k.data(), v.data(), b.data(), pool);
      ASSERT_EQ(a, b) << "layer " << layer << " (" << choices[layer].str() << ") step " << step;
    }
  const auto *l1 = dynamic_cast<LshAttention &>(*tuned).index(1, 0);
  ASSERT_NE(l1, nullptr);
  EXPECT_EQ(dynamic_cast<LshAttention &>(*tuned).index(0, 0), nullptr); // dense: no index
  EXPECT_GT(tuned->stats().cost2(), 0.0);
  const std::string str = per.str(layers);
  EXPECT_NE(str.find("per-layer[0:dense 1:K=8 L=75 t=2 2:K=10 L=150 t=1 3:K=8 L=75 t=1]"),
            std::string::npos)
      << str;
  EXPECT_EQ(per.DenseLayers(layers), std::vector<size_t>{0});
}

// A narrower configuration over a wide W's storage is the W of its own (K, L): the column
// prefix of pig::ref::simhash_matrix, entry for entry and in its view's norms.
TEST(SimHash, SharedPrefixEqualsItsOwnMatrix) {
  const std::uint64_t seed = 0x9e3779b97f4a7c15ull;
  auto wide = std::make_shared<const lsh::SimHash>(seed, 64, 11, 200);
  const lsh::SimHash narrow(wide, 8, 75), own(seed, 64, 8, 75);
  EXPECT_EQ(narrow.K(), 8);
  EXPECT_EQ(narrow.L(), 75);
  for (size_t r = 0; r < 64; ++r)
    for (size_t c = 0; c < 8 * 75; ++c)
      ASSERT_EQ(narrow.at(r, c), own.at(r, c)) << r << "," << c;
  const lsh::SimHashView a = narrow.view(), b = own.view();
  for (size_t c = 0; c < 8 * 75; ++c)
    ASSERT_EQ(a.col_norm[c], b.col_norm[c]);
  EXPECT_EQ(a.cols, wide->view().cols); // the wide row stride
  const lsh::SimHash copy = narrow;     // copies share, never dangle
  EXPECT_EQ(copy.view().w, a.w);
  EXPECT_THROW(lsh::SimHash(wide, 12, 200), std::invalid_argument);
  EXPECT_THROW(lsh::SimHash(nullptr, 8, 75), std::invalid_argument);
}

TEST(LshAttention, PerLayerChoicesAreValidated) {
  const AttentionShape shape{4, 6, 2, 64, 128};
  auto message = [&](const AttentionSpec &spec) -> std::string {
    try {
      MakeAttention(spec, shape);
    } catch (const std::invalid_argument &e) {
      return e.what();
    }
    return "no exception";
  };
  AttentionSpec s;
  s.method = pig::spec::Method::magicpig;
  s.layers.assign(3, LayerLsh{});
  EXPECT_NE(message(s).find("per-layer choices for 3 layers, the model has 4"), std::string::npos)
      << message(s);
  s.layers.assign(4, LayerLsh{});
  s.layers[2].L = 0;
  EXPECT_NE(message(s).find("layer 2: LSH L must be in"), std::string::npos) << message(s);
  s.layers[2].L = 150;
  s.dense_layers = {1};
  s.dense_layers_set = true;
  EXPECT_NE(message(s).find("not both"), std::string::npos) << message(s);
}

TEST(LshAttention, ContextFullIsAnError) {
  AttentionSpec s;
  s.method = pig::spec::Method::magicpig;
  const AttentionShape shape{1, 2, 1, 16, 8};
  auto attn = MakeAttention(s, shape);
  ThreadPool pool(1);
  std::vector<float> x(9 * 2 * 16, 0.1f), out(9 * 2 * 16);
  EXPECT_THROW(attn->Forward(0, 0, 9, x.data(), x.data(), x.data(), out.data(), pool),
               std::runtime_error);
}

// What a memory budget reserves (LlamaBatch) bounds what the index grows to: decoded to its last
// position, the Attention holds no more than ReservedBytes() said before the first token; and the
// reservation is more than the KV store alone (it counts the tables).
// What a budget reserves bounds what the attention holds at full capacity: the KV store, the
// index and, with fitted hashing, its maps and per-token norms.
TEST(LshAttention, ReservedBytesBoundTheIndexAtFullCapacity) {
  for (const char *transform : {"plain", "whiten:a=0.15"}) {
    SCOPED_TRACE(transform);
    AttentionSpec s;
    s.method = pig::spec::Method::magicpig;
    s.dense_layers_set = true; // both layers sparse
    s.transform = ParseServedTransform(transform);
    const size_t prompt = 200, steps = 40, d = 64;
    const AttentionShape shape{2, 2, 1, d, prompt + steps};
    auto attn = MakeAttention(s, shape);
    const size_t reserved = attn->ReservedBytes();
    EXPECT_GT(reserved, attn->cache().MemoryBytes());
    ThreadPool pool(2);
    std::mt19937 rng(3);
    std::normal_distribution<float> g;
    std::vector<float> kv(prompt * d), q(prompt * 2 * d), out(prompt * 2 * d);
    for (auto &x : kv)
      x = g(rng);
    for (auto &x : q)
      x = g(rng);
    for (size_t layer = 0; layer < 2; ++layer)
      attn->Forward(layer, 0, prompt, q.data(), kv.data(), kv.data(), out.data(), pool);
    for (size_t i = 0; i < steps; ++i)
      for (size_t layer = 0; layer < 2; ++layer)
        attn->Forward(layer, prompt + i, 1, q.data(), kv.data() + i * d, kv.data() + i * d,
                      out.data(), pool);
    const AttentionStats st = attn->stats();
    EXPECT_GT(st.index_bytes, 0u);
    EXPECT_EQ(st.hash_bytes > 0, std::string(transform) != "plain");
    EXPECT_LE(attn->MemoryBytes(), reserved);
  }
}

// One sequence's projected rows for every layer: prefill, then decode steps (PrepareDecode tests).
struct Rows {
  size_t layers, heads, kvh, d;
  std::vector<std::vector<float>> q, k, v; // [layer]: positions x (heads | kvh) x d
  Rows(size_t layers_, size_t heads_, size_t kvh_, size_t d_, size_t n)
      : layers(layers_), heads(heads_), kvh(kvh_), d(d_), q(layers_), k(layers_), v(layers_) {
    Stream s(d);
    Case c{"rows", 0, 0, 1.0, false, lsh::DType::f32};
    for (size_t l = 0; l < layers; ++l) {
      k[l].resize(n * kvh * d);
      v[l].resize(n * kvh * d);
      q[l].resize(n * heads * d);
      s.Keys(k[l].data(), k[l].size(), c);
      s.Fill(v[l].data(), v[l].size());
      s.Fill(q[l].data(), q[l].size(), 0.3f);
    }
  }
  void Prefill(Attention &a, size_t n, ThreadPool &pool) const {
    std::vector<float> out(n * heads * d);
    for (size_t l = 0; l < layers; ++l)
      a.Forward(l, 0, n, q[l].data(), k[l].data(), v[l].data(), out.data(), pool);
  }
  // The outputs of decode steps at positions [from, to), every layer.
  std::vector<std::vector<float>> Decode(Attention &a, size_t from, size_t to,
                                         ThreadPool &pool) const {
    std::vector<std::vector<float>> outs;
    for (size_t pos = from; pos < to; ++pos)
      for (size_t l = 0; l < layers; ++l) {
        outs.emplace_back(heads * d);
        a.Forward(l, pos, 1, &q[l][pos * heads * d], &k[l][pos * kvh * d], &v[l][pos * kvh * d],
                  outs.back().data(), pool);
      }
    return outs;
  }
};

struct PrepareCase {
  const char *name;
  const char *transform; // ref::TransformSpec::parse
  lsh::DType dtype;
};

class PrepareDecodeTest : public ::testing::TestWithParam<PrepareCase> {};

// The index built ahead of the first decode step (PrepareDecode, in slices of any size) is the
// one that step would build: every decode output equals the lazy path's bit for bit.
TEST_P(PrepareDecodeTest, DecodesBitIdenticalToTheLazyBuild) {
  const PrepareCase c = GetParam();
  const size_t layers = 3, kvh = 3, heads = 9, d = 64, prompt = 200, steps = 40;
  const AttentionShape shape{layers, heads, kvh, d, prompt + steps};
  AttentionSpec spec;
  spec.method = pig::spec::Method::magicpig;
  spec.K = 8;
  spec.L = 75;
  spec.kv_dtype = c.dtype;
  spec.dense_layers = {1};
  spec.dense_layers_set = true;
  spec.transform = ref::TransformSpec::parse(c.transform);
  const Rows rows(layers, heads, kvh, d, prompt + steps);
  ThreadPool pool(2);
  const size_t units = 2 * kvh; // sparse layers 0 and 2

  LshAttention lazy(spec, shape);
  rows.Prefill(lazy, prompt, pool);
  EXPECT_EQ(lazy.DecodeUnitsPending(), units);
  const auto want = rows.Decode(lazy, prompt, prompt + steps, pool);
  EXPECT_EQ(lazy.DecodeUnitsPending(), 0u); // the first step built them all
  EXPECT_GT(lazy.stats().cost2(), 0.0);     // the steps sampled
  EXPECT_EQ(lazy.stats().hash_bytes > 0, !spec.transform.identity());

  for (size_t slice : {size_t(1), size_t(2), units}) {
    LshAttention ahead(spec, shape);
    rows.Prefill(ahead, prompt, pool);
    EXPECT_EQ(ahead.PrepareDecode(pool, 0), units) << "0 units: a report, nothing built";
    EXPECT_EQ(ahead.index(0, 0), nullptr);
    size_t left = units, calls = 0;
    while (left > 0) {
      const size_t next = ahead.PrepareDecode(pool, slice);
      ASSERT_EQ(next, left - std::min(slice, left)) << c.name << " slice " << slice;
      EXPECT_EQ(ahead.DecodeUnitsPending(), next);
      left = next;
      ++calls;
    }
    EXPECT_EQ(calls, (units + slice - 1) / slice);
    for (size_t l : {0, 2})
      for (size_t h = 0; h < kvh; ++h) {
        ASSERT_NE(ahead.index(l, h), nullptr) << l << "," << h;
        EXPECT_EQ(ahead.index(l, h)->n(), prompt); // over the cached positions
      }
    EXPECT_EQ(ahead.index(1, 0), nullptr); // the dense layer: not a unit
    // Done: a second call finds nothing and changes nothing.
    const lsh::LshIndex *built = ahead.index(2, 1);
    EXPECT_EQ(ahead.PrepareDecode(pool, 100), 0u);
    EXPECT_EQ(ahead.index(2, 1), built);
    EXPECT_EQ(ahead.index(2, 1)->n(), prompt);
    const auto got = rows.Decode(ahead, prompt, prompt + steps, pool);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << c.name << " slice " << slice << " step " << i / layers
                                 << " layer " << i % layers;
    EXPECT_EQ(ahead.stats().sampled, lazy.stats().sampled);
    EXPECT_EQ(ahead.stats().index_bytes, lazy.stats().index_bytes);
    EXPECT_EQ(ahead.stats().hash_bytes, lazy.stats().hash_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PrepareDecodeTest,
    ::testing::Values(PrepareCase{"plain_bf16", "plain", lsh::DType::bf16},
                      PrepareCase{"plain_q8", "plain", lsh::DType::q8},
                      PrepareCase{"whiten_bf16", "whiten:a=0.15", lsh::DType::bf16},
                      PrepareCase{"whiten_q8", "whiten:a=0.15", lsh::DType::q8}),
    [](const auto &info) { return std::string(info.param.name); });

// A unit is an index the next decode step would build: none while that step would still attend
// densely (fewer than kMinIndexed indexed tokens), none for dense layers or dense attention;
// LoadPrefix and Reset set what is cached; a forwarding Attention forwards.
TEST(PrepareDecode, UnitsAreTheIndexesTheNextStepBuilds) {
  const size_t layers = 4, kvh = 2, heads = 6, d = 64;
  AttentionSpec spec;
  spec.method = pig::spec::Method::magicpig;
  spec.K = 8;
  spec.L = 75;
  spec.dense_layers = {0, 3};
  spec.dense_layers_set = true;
  // The next step (n_tokens = prompt + 1) indexes prompt + 1 - sink - local tokens.
  const size_t first = spec.sink + spec.local + LshAttention::kMinIndexed - 1;
  const AttentionShape shape{layers, heads, kvh, d, first + 8};
  const Rows rows(layers, heads, kvh, d, first + 8);
  ThreadPool pool(2);
  {
    LshAttention a(spec, shape);
    EXPECT_EQ(a.DecodeUnitsPending(), 0u); // nothing cached
    rows.Prefill(a, first - 1, pool);
    EXPECT_EQ(a.PrepareDecode(pool, 10), 0u); // too short: the next step is dense
    EXPECT_EQ(a.index(1, 0), nullptr);
    rows.Decode(a, first - 1, first, pool);
    EXPECT_EQ(a.index(1, 0), nullptr); // and it was
    EXPECT_EQ(a.DecodeUnitsPending(), 2 * kvh);
    EXPECT_EQ(a.PrepareDecode(pool, 3), 1u);
    EXPECT_EQ(a.index(1, 0)->n(), first); // built over what is cached, 15 indexed tokens
    EXPECT_EQ(a.index(1, 0)->count(), LshAttention::kMinIndexed - 1);
    a.Reset();
    EXPECT_EQ(a.DecodeUnitsPending(), 0u);
    EXPECT_EQ(a.index(1, 0), nullptr);
  }
  {
    // The lazy build at the threshold: built over the n - 1 cached positions, then extended.
    LshAttention a(spec, shape);
    rows.Prefill(a, first, pool);
    rows.Decode(a, first, first + 1, pool);
    ASSERT_NE(a.index(2, 1), nullptr);
    EXPECT_EQ(a.index(2, 1)->n(), first + 1);
    EXPECT_EQ(a.index(2, 1)->count(), LshAttention::kMinIndexed);
  }
  {
    DenseAttention dense(shape, lsh::DType::bf16);
    rows.Prefill(dense, first + 4, pool);
    EXPECT_EQ(dense.PrepareDecode(pool, 10), 0u);
    EXPECT_EQ(dense.DecodeUnitsPending(), 0u);
    AttentionSpec topk = spec;
    topk.method = pig::spec::Method::topk;
    auto budget = MakeAttention(topk, shape);
    budget->LoadPrefix(dense.cache(), first + 4);
    EXPECT_EQ(budget->PrepareDecode(pool, 10), 0u);

    // LoadPrefix: what it loads is cached; through a ForwardingAttention.
    ForwardingAttention fwd(std::make_unique<LshAttention>(spec, shape));
    fwd.LoadPrefix(dense.cache(), first + 4);
    EXPECT_EQ(fwd.DecodeUnitsPending(), 2 * kvh);
    EXPECT_EQ(fwd.PrepareDecode(pool, 10), 0u);
    EXPECT_EQ(fwd.DecodeUnitsPending(), 0u);
    // A full cache has no next step, so nothing to build for it.
    auto full = std::make_unique<LshAttention>(spec, shape);
    full->LoadPrefix(dense.cache(), shape.capacity);
    EXPECT_EQ(full->DecodeUnitsPending(), 0u);
  }
  {
    // Per-layer choices: each sparse layer's kv-heads are units, whatever its (K, L).
    AttentionSpec per;
    per.method = pig::spec::Method::magicpig;
    per.layers = {{{}, true}, {{8, 75, 2}}, {{6, 40, 1}}, {{8, 75, 2}}};
    LshAttention a(per, shape);
    rows.Prefill(a, first + 2, pool);
    EXPECT_EQ(a.DecodeUnitsPending(), 3 * kvh);
  }
}

// ReservedBytesOf is what the constructed Attention reserves, for every method, KV element type
// and capacity (short ones included: the tables are reserved for the capacity whatever is
// indexed), and it refuses what MakeAttention refuses, with the same message.
TEST(ReservedBytesOf, EqualsTheConstructedAttentionsReservedBytes) {
  const size_t layers = 4, heads = 6, kvh = 2, d = 64;
  std::vector<std::pair<std::string, AttentionSpec>> specs;
  for (const char *m : {"dense", "magicpig", "topk", "oracle", "quest"}) {
    AttentionSpec s;
    s.method = *pig::spec::parse_method(m);
    specs.emplace_back(m, s);
  }
  AttentionSpec per;
  per.method = pig::spec::Method::magicpig;
  per.layers = {{{}, true}, {{8, 75, 2}}, {{10, 150, 1}}, {{12, 40, 2}}};
  specs.emplace_back("magicpig per-layer", per);
  AttentionSpec fitted;
  fitted.method = pig::spec::Method::magicpig;
  fitted.transform = ref::TransformSpec::parse("whiten:a=0.15");
  fitted.dense_layers_set = true; // every layer sparse
  specs.emplace_back("magicpig whiten, no dense layer", fitted);
  for (auto [name, spec] : specs)
    for (lsh::DType dt : {lsh::DType::f32, lsh::DType::bf16, lsh::DType::q8})
      for (size_t cap : {size_t(10), size_t(50), size_t(5000)}) {
        spec.kv_dtype = dt;
        const AttentionShape shape{layers, heads, kvh, d, cap};
        const size_t want = MakeAttention(spec, shape)->ReservedBytes();
        EXPECT_EQ(ReservedBytesOf(spec, shape), want)
            << name << " " << lsh::to_string(dt) << " capacity " << cap;
        EXPECT_GE(want, KvCache::BytesFor(shape, dt));
      }
}

TEST(ReservedBytesOf, RefusesWhatMakeAttentionRefuses) {
  const AttentionShape ok{4, 6, 2, 64, 128};
  auto message = [](auto &&f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument &e) {
      return e.what();
    }
    return "no std::invalid_argument";
  };
  std::vector<std::pair<AttentionSpec, AttentionShape>> cases;
  AttentionSpec s;
  s.method = pig::spec::Method::magicpig;
  s.K = 0;
  cases.emplace_back(s, ok);
  s = {};
  s.method = pig::spec::Method::quest;
  s.budget = 2;
  cases.emplace_back(s, ok);
  s = {};
  s.method = pig::spec::Method::topk;
  s.dense_layers = {9};
  s.dense_layers_set = true;
  cases.emplace_back(s, ok);
  s = {};
  s.method = pig::spec::Method::magicpig;
  s.transform = ref::TransformSpec::parse("pca:r=8");
  cases.emplace_back(s, ok);
  s = {};
  s.method = pig::spec::Method::magicpig;
  cases.emplace_back(s, AttentionShape{2, 18, 1, 64, 64}); // a GQA group over the kernels' limit
  for (const char *m : {"dense", "magicpig", "oracle"}) {
    s = {};
    s.method = *pig::spec::parse_method(m);
    cases.emplace_back(s, AttentionShape{2, 6, 2, 63, 64}); // odd head dim
    cases.emplace_back(s, AttentionShape{2, 5, 2, 64, 64}); // heads not in whole groups
    s.kv_dtype = lsh::DType::q8;
    cases.emplace_back(s, AttentionShape{2, 6, 2, 80, 64}); // q8 needs a multiple of 32
  }
  for (const auto &[spec, shape] : cases) {
    const std::string want = message([&] { MakeAttention(spec, shape); });
    EXPECT_NE(want, "no std::invalid_argument") << spec.str(shape.n_layers);
    EXPECT_EQ(message([&] { ReservedBytesOf(spec, shape); }), want);
  }
}

// A huge capacity is counted without wrapping: the exact size when it fits in a size_t, else
// std::length_error, never a small number; and the KV store refuses to allocate a wrapped size.
TEST(ReservedBytesOf, HugeCapacitiesNeverWrap) {
  const size_t layers = 30, heads = 9, kvh = 3, d = 64;
  for (const char *m : {"dense", "magicpig", "quest"}) {
    AttentionSpec spec;
    spec.method = *pig::spec::parse_method(m);
    const bool lsh = spec.method == pig::spec::Method::magicpig;
    for (size_t cap : {size_t(10'000'000'000'000), size_t(1'000'000'000'000'000), size_t(1) << 60,
                       SIZE_MAX / 2, SIZE_MAX}) {
      // Exact in long double (64-bit mantissa): K and V of bf16 rows (128 bytes), and for
      // magicpig the 28 sparse layers' tables (u16 ids and bucket offsets per segment).
      const long double n = (long double)cap;
      long double want = 2.0L * layers * kvh * 128 * n;
      if (lsh) {
        const long double segments = std::ceil(n / lsh::kSegmentTokens);
        want += 28.0L * kvh * 2 * (segments * 150 * 1025 + n * 150);
      }
      const AttentionShape shape{layers, heads, kvh, d, cap};
      if (want <= (long double)SIZE_MAX)
        EXPECT_EQ((long double)ReservedBytesOf(spec, shape), want) << m << " " << cap;
      else
        EXPECT_THROW(ReservedBytesOf(spec, shape), std::length_error) << m << " " << cap;
    }
  }
  EXPECT_THROW(KvCache(AttentionShape{layers, heads, kvh, d, size_t(1) << 60}, lsh::DType::bf16),
               std::length_error);
  EXPECT_THROW(lsh::IndexLayout::of(SIZE_MAX / 2, 10, 150), std::length_error);
}

// Dense decode over the same cache: the GQA group pass equals the reference per head.
TEST(DenseAttention, DecodeMatchesReference) {
  const size_t heads = 4, kvh = 2, d = 32, n = 70;
  for (lsh::DType dt : {lsh::DType::f32, lsh::DType::bf16}) {
    DenseAttention attn(AttentionShape{1, heads, kvh, d, n}, dt);
    ThreadPool pool(2);
    Stream s(d);
    Case c{"dense", 0, 0, 1.0, false, dt};
    std::vector<float> k(n * kvh * d), v(n * kvh * d), q(n * heads * d), out(n * heads * d);
    s.Keys(k.data(), k.size(), c);
    s.Fill(v.data(), v.size());
    s.Fill(q.data(), q.size(), 0.3f);
    attn.Forward(0, 0, n - 1, q.data(), k.data(), v.data(), out.data(), pool);
    attn.Forward(0, n - 1, 1, &q[(n - 1) * heads * d], &k[(n - 1) * kvh * d], &v[(n - 1) * kvh * d],
                 out.data(), pool);
    for (size_t h = 0; h < heads; ++h) {
      ref::OwnedMatrix Km(n, d), Vm(n, d);
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < d; ++j) {
          Km.at(i, j) = Bf16Round(k[(i * kvh + h / 2) * d + j], dt);
          Vm.at(i, j) = Bf16Round(v[(i * kvh + h / 2) * d + j], dt);
        }
      const auto e = ref::dense_attention({&q[((n - 1) * heads + h) * d], d}, Km.view(), Vm.view());
      for (size_t j = 0; j < d; ++j)
        ASSERT_NEAR(out[h * d + j], e.out[j], 2e-5);
    }
    EXPECT_EQ(attn.stats().decode_steps, 1u);
  }
}

// dense_below: steps of a sequence shorter than it decode densely (the output DenseAttention
// writes, nothing sampled); at the first step at or past it the index is built over the positions
// cached before it, and from then on the output is that of a sequence whose first decode step
// was there (LoadPrefix), bit for bit.
TEST(LshAttentionDenseBelow, DenseBelowThenSampledAsIfTheFirstStepWereThere) {
  const size_t layers = 2, kvh = 2, heads = 6, d = 64, prompt = 280, steps = 40, below = 300;
  const AttentionShape shape{layers, heads, kvh, d, prompt + steps};
  AttentionSpec spec;
  spec.method = pig::spec::Method::magicpig;
  spec.dense_layers = {0};
  spec.dense_layers_set = true;
  spec.dense_below = below;
  LshAttention attn(spec, shape);
  DenseAttention dense(shape);
  std::unique_ptr<LshAttention> late; // dense_below 0, its first decode step at `below`
  ThreadPool pool(2);
  Case c{"dense_below", prompt, steps, 1.0, false, lsh::DType::bf16};
  Stream s(d);
  std::vector<float> k(prompt * kvh * d), v(k.size()), q(prompt * heads * d), out(q.size()),
      out2(q.size()), out3(q.size());
  s.Keys(k.data(), k.size(), c);
  s.Fill(v.data(), v.size());
  s.Fill(q.data(), q.size(), 0.3f);
  for (size_t l = 0; l < layers; ++l) {
    attn.Forward(l, 0, prompt, q.data(), k.data(), v.data(), out.data(), pool);
    dense.Forward(l, 0, prompt, q.data(), k.data(), v.data(), out2.data(), pool);
  }
  for (size_t step = 0; step < steps; ++step) {
    const size_t pos = prompt + step, n = pos + 1;
    s.Keys(k.data(), kvh * d, c);
    s.Fill(v.data(), kvh * d);
    s.Fill(q.data(), heads * d, 0.3f);
    if (n == below) {
      AttentionSpec at = spec;
      at.dense_below = 0;
      late = std::make_unique<LshAttention>(at, shape);
      late->LoadPrefix(attn.cache(), pos);
    }
    for (size_t l = 0; l < layers; ++l) {
      const AttentionStats before = attn.stats();
      attn.Forward(l, pos, 1, q.data(), k.data(), v.data(), out.data(), pool);
      if (n < below) {
        dense.Forward(l, pos, 1, q.data(), k.data(), v.data(), out2.data(), pool);
        for (size_t j = 0; j < heads * d; ++j)
          ASSERT_EQ(out[j], out2[j]) << "step " << step << " layer " << l << " at " << j;
        EXPECT_EQ(attn.stats().sampled, before.sampled) << "nothing sampled below " << below;
        EXPECT_EQ(attn.index(1, 0), nullptr);
      } else {
        late->Forward(l, pos, 1, q.data(), k.data(), v.data(), out3.data(), pool);
        for (size_t j = 0; j < heads * d; ++j)
          ASSERT_EQ(out[j], out3[j]) << "step " << step << " layer " << l << " at " << j;
        if (l == 1) {
          EXPECT_GT(attn.stats().indexed, before.indexed) << "sampled from " << below << " on";
        }
      }
    }
  }
}

// dense_below = measured: MakeAttention resolves it to the crossing MeasuredDenseCrossover
// times, once per process for a configuration (the second call is remembered).
TEST(LshAttentionDenseBelow, MeasuredIsResolvedOnceToAProbedLength) {
  AttentionSpec spec;
  spec.method = pig::spec::Method::magicpig;
  spec.dense_below = AttentionSpec::kDenseBelowMeasured;
  const AttentionShape shape{2, 6, 2, 64, 64};
  const size_t n = MeasuredDenseCrossover(spec, shape);
  EXPECT_GE(n, 512u);
  EXPECT_LE(n, 16384u);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(MeasuredDenseCrossover(spec, shape), n);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.01);
  const auto attn = MakeAttention(spec, shape);
  const auto &lsh = dynamic_cast<const LshAttention &>(*attn);
  EXPECT_EQ(lsh.spec().dense_below, n);
  EXPECT_NE(lsh.spec().str(2).find("dense-below=" + std::to_string(n)), std::string::npos)
      << lsh.spec().str(2);
}

} // namespace
