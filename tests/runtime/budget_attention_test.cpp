// The topk / oracle / quest baselines and lsh-hybrid of the runtime (budget_attention.h) against
// the scalar reference pig::ref on the same rows: a prefill Forward stores keys and values, a
// decode Forward runs the method, and every head's output must equal the reference method's (static
// part merged with the indexed part by LSE) computed on the keys and values as stored (bf16-rounded
// for a bf16 cache). Small synthetic shapes only: no model.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "pig/reference/attention.h"
#include "pig/reference/hybrid.h"
#include "pig/reference/lsh.h"
#include "pig/reference/magicpig.h"
#include "pig/reference/quest.h"
#include "pig/reference/random.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/budget_attention.h"
#include "pig/runtime/ops.h"

namespace pig::runtime {
namespace {

using lsh::DType;

// Round to nearest even, written here independently of the runtime's converter.
float RoundBf16(float x) {
  std::uint32_t b = std::bit_cast<std::uint32_t>(x);
  b += 0x7fffu + ((b >> 16) & 1u);
  return std::bit_cast<float>(b & 0xffff0000u);
}

struct Data {
  // Per layer: q is n x (n_heads d), k and v are n x (n_kv_heads d).
  std::vector<std::vector<float>> q, k, v;
};

enum class Keys { random, equal, huge };

Data MakeData(const AttentionShape &s, size_t n, std::uint64_t seed, Keys kind = Keys::random) {
  ref::Rng rng(seed);
  Data x;
  const size_t d = s.head_dim;
  for (size_t l = 0; l < s.n_layers; ++l) {
    std::vector<float> q(n * s.n_heads * d), k(n * s.n_kv_heads * d), v(n * s.n_kv_heads * d);
    // Queries of norm ~ 2 sqrt(d) and keys with a common offset, so that attention is peaked
    // enough for the selection to matter.
    for (auto &e : q)
      e = float(2.0 * rng.gaussian());
    for (size_t i = 0; i < k.size(); ++i)
      k[i] = float(rng.gaussian() + (i % d < 4 ? 1.5 : 0.0));
    for (auto &e : v)
      e = float(rng.gaussian());
    if (kind == Keys::equal) // every position the same key: all scores tie
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < s.n_kv_heads * d; ++j)
          k[i * s.n_kv_heads * d + j] = k[j];
    if (kind == Keys::huge) { // logits in the thousands: only the max-shifted softmax survives
      for (auto &e : k)
        e *= 300.0f;
      for (auto &e : q)
        e *= 30.0f;
    }
    x.q.push_back(std::move(q));
    x.k.push_back(std::move(k));
    x.v.push_back(std::move(v));
  }
  return x;
}

AttentionShape Shape(size_t capacity = 256) {
  AttentionShape s;
  s.n_layers = 3;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 16;
  s.capacity = capacity;
  return s;
}

AttentionSpec Spec(const std::string &method, DType dtype, double budget = 0.1) {
  AttentionSpec spec;
  spec.method = *pig::spec::parse_method(method);
  spec.kv_dtype = dtype;
  spec.sink = 4;
  spec.local = 8;
  spec.dense_layers = {1};
  spec.dense_layers_set = true;
  spec.budget = budget;
  spec.quest_page = 4;
  spec.sample_seed = 7;
  return spec;
}

// Stores positions [0, n - 1) of every layer by one prefill Forward (dense), then decodes
// position n - 1 in every layer. Returns the decode outputs, per layer n_heads x d.
std::vector<std::vector<float>> Decode(Attention &att, const Data &x, size_t n, ThreadPool &pool) {
  const AttentionShape &s = att.shape();
  const size_t d = s.head_dim, qw = s.n_heads * d, kw = s.n_kv_heads * d;
  std::vector<float> scratch((n ? n : 1) * qw);
  if (n > 1)
    for (size_t l = 0; l < s.n_layers; ++l)
      att.Forward(l, 0, n - 1, x.q[l].data(), x.k[l].data(), x.v[l].data(), scratch.data(), pool);
  std::vector<std::vector<float>> out(s.n_layers, std::vector<float>(qw));
  for (size_t l = 0; l < s.n_layers; ++l)
    att.Forward(l, n - 1, 1, x.q[l].data() + (n - 1) * qw, x.k[l].data() + (n - 1) * kw,
                x.v[l].data() + (n - 1) * kw, out[l].data(), pool);
  return out;
}

// Rows [0, n) of (layer, kv-head) as the cache holds them: f32 inputs, rounded for bf16.
ref::OwnedMatrix Rows(const std::vector<float> &src, const AttentionShape &s, size_t kvh, size_t n,
                      DType dtype) {
  const size_t d = s.head_dim;
  ref::OwnedMatrix m(n, d);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < d; ++j) {
      const float e = src[(i * s.n_kv_heads + kvh) * d + j];
      m.at(i, j) = dtype == DType::bf16 ? RoundBf16(e) : e;
    }
  return m;
}

ref::OwnedMatrix Slice(const ref::OwnedMatrix &m, size_t begin, size_t end) {
  ref::OwnedMatrix r(end - begin, m.cols);
  std::copy(m.row(begin), m.row(end), r.data.begin());
  return r;
}

struct Expected {
  ref::Attention attention;
  bool dense = false;
  size_t indexed = 0, attended = 0;
};

// What pig::ref says head h of `layer` outputs for the query at position n - 1. lsh-hybrid: the
// runtime centres the keys by the mean of the indexed rows at its first decode step (positions
// [sink, mean_end); 0: this step's) and keeps it; the reference index is built on keys shifted by
// that mean (Centering::none), which is the same index.
Expected Reference(const AttentionSpec &spec, const AttentionShape &s, const Data &x, size_t n,
                   size_t layer, size_t h, size_t mean_end = 0) {
  const size_t d = s.head_dim, kvh = ref::kv_head_for(h, s.n_heads, s.n_kv_heads);
  const ref::OwnedMatrix K = Rows(x.k[layer], s, kvh, n, spec.kv_dtype);
  const ref::OwnedMatrix V = Rows(x.v[layer], s, kvh, n, spec.kv_dtype);
  const std::span<const float> q(x.q[layer].data() + ((n - 1) * s.n_heads + h) * d, d);
  const ref::TokenSplit split = ref::split_tokens(n, {spec.sink, spec.local});
  const auto dense = spec.DenseLayers(s.n_layers);
  Expected e;
  if (std::find(dense.begin(), dense.end(), layer) != dense.end() || split.indexed() == 0) {
    e.attention = ref::dense_attention(q, K, V);
    e.dense = true;
    return e;
  }
  if (spec.method == pig::spec::Method::lsh_hybrid) {
    const size_t me = mean_end ? mean_end : split.indexed_end;
    const std::vector<float> mean = ref::mean_of_rows(K, spec.sink, me);
    ref::OwnedMatrix shifted(n, d);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < d; ++j)
        shifted.at(i, j) = K.at(i, j) - mean[j];
    const ref::LshConfig cfg{spec.K, spec.L, spec.t, spec.seed};
    const ref::OwnedMatrix W = ref::simhash_matrix(spec.seed, d, spec.K, spec.L);
    const ref::LshIndex index =
        ref::build_index(shifted, W, cfg, {spec.sink, spec.local}, ref::Centering::none);
    ref::HybridConfig hc = spec.hybrid;
    hc.budget = spec.budget;
    hc.seed = OracleSeed(spec.sample_seed, layer, h, n - 1);
    const ref::HybridResult r = ref::hybrid_attention(q, K, V, W, index, hc);
    e.attention = r.attention;
    e.indexed = split.indexed();
    e.attended = r.head.size() + r.tail.size();
    return e;
  }
  const ref::Attention st = ref::attention_over(q, K, V, split.static_ids());
  const ref::OwnedMatrix Ki = Slice(K, split.indexed_begin, split.indexed_end);
  const ref::OwnedMatrix Vi = Slice(V, split.indexed_begin, split.indexed_end);
  e.indexed = split.indexed();
  const size_t m = BudgetTokens(spec.budget, e.indexed);
  ref::SparseEstimate part;
  if (spec.method == pig::spec::Method::topk) {
    part = ref::topk_attention(q, Ki, Vi, m);
  } else if (spec.method == pig::spec::Method::oracle) {
    part = ref::oracle_sampling(q, Ki, Vi, m, OracleSeed(spec.sample_seed, layer, h, n - 1));
  } else {
    const size_t P = spec.quest_page, pages = (e.indexed + P - 1) / P;
    part = ref::quest_attention(q, Ki, Vi, P, std::min(pages, (m + P - 1) / P));
  }
  e.attention = ref::merge(st, part.attention);
  e.attended = part.attended;
  return e;
}

struct Totals {
  double indexed = 0, sampled = 0;
};

// Every head of every layer against the reference; returns the expected stats of this step.
// Sparse heads are scalar double arithmetic on both sides (tight); dense heads go through the
// f32 dense kernel.
Totals Check(const AttentionSpec &spec, const AttentionShape &s, const Data &x, size_t n,
             const std::vector<std::vector<float>> &out, bool check_dense = true,
             size_t mean_end = 0) {
  Totals t;
  const size_t d = s.head_dim;
  for (size_t l = 0; l < s.n_layers; ++l)
    for (size_t h = 0; h < s.n_heads; ++h) {
      const Expected e = Reference(spec, s, x, n, l, h, mean_end);
      t.indexed += double(e.indexed);
      t.sampled += double(e.attended);
      if (e.dense && !check_dense)
        continue;
      const std::span<const float> got(out[l].data() + h * d, d);
      const double err = ref::relative_l2_error(got, e.attention.out);
      EXPECT_LE(err, e.dense ? 2e-4 : 1e-5)
          << spec.method_name() << " " << lsh::to_string(spec.kv_dtype) << " n=" << n
          << " layer=" << l << " head=" << h << (e.dense ? " (dense)" : "");
    }
  return t;
}

class BudgetAttentionTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {
protected:
  ThreadPool pool_{2};
};

TEST_P(BudgetAttentionTest, MatchesReferenceAcrossLengths) {
  const auto [method, dtype] = GetParam();
  const AttentionShape s = Shape();
  // 1 and 2: no prefill / a one-token one; 12 and 13: the edge of sink + local (= 12); 14: one
  // indexed token; 64 and 101: several pages, budgets rounding to 5 and 9.
  for (size_t n : {1, 2, 12, 13, 14, 29, 64, 101}) {
    const AttentionSpec spec = Spec(method, dtype);
    const Data x = MakeData(s, n, 1000 + n);
    auto att = MakeBudgetAttention(spec, s);
    const auto out = Decode(*att, x, n, pool_);
    const Totals t = Check(spec, s, x, n, out);
    const AttentionStats st = att->stats();
    // A one-token prefill (n = 2) is a single-token Forward too.
    EXPECT_EQ(st.decode_steps, n == 2 ? 2u : 1u);
    EXPECT_EQ(st.indexed, t.indexed) << "n=" << n;
    EXPECT_EQ(st.sampled, t.sampled) << "n=" << n;
  }
}

TEST_P(BudgetAttentionTest, AdversarialKeys) {
  const auto [method, dtype] = GetParam();
  const AttentionShape s = Shape();
  for (Keys kind : {Keys::equal, Keys::huge}) {
    const AttentionSpec spec = Spec(method, dtype, 0.2);
    const size_t n = 77;
    const Data x = MakeData(s, n, 55, kind);
    auto att = MakeBudgetAttention(spec, s);
    const auto out = Decode(*att, x, n, pool_);
    // Huge logits are beyond the f32 dense kernel's accuracy: check only the scalar heads then.
    const Totals t = Check(spec, s, x, n, out, kind != Keys::huge);
    EXPECT_EQ(att->stats().sampled, t.sampled);
    for (const auto &o : out)
      for (float e : o)
        EXPECT_TRUE(std::isfinite(e));
  }
}

// Quest's pages are folded in step by step; every step must still equal pages built from
// scratch, also after rewinding to an earlier position.
TEST_P(BudgetAttentionTest, ManyDecodeStepsAndRewind) {
  const auto [method, dtype] = GetParam();
  const AttentionShape s = Shape();
  const AttentionSpec spec = Spec(method, dtype, 0.15);
  const size_t total = 70;
  const Data x = MakeData(s, total, 99);
  auto att = MakeBudgetAttention(spec, s);
  const size_t d = s.head_dim, qw = s.n_heads * d, kw = s.n_kv_heads * d;
  std::vector<float> scratch(total * qw);
  Totals sum;
  auto decode = [&](size_t pos) {
    std::vector<std::vector<float>> out(s.n_layers, std::vector<float>(qw));
    for (size_t l = 0; l < s.n_layers; ++l)
      att->Forward(l, pos, 1, x.q[l].data() + pos * qw, x.k[l].data() + pos * kw,
                   x.v[l].data() + pos * kw, out[l].data(), pool_);
    // lsh-hybrid's mean: of [sink, 13), the indexed part at the first decode step (n = 21).
    const Totals t = Check(spec, s, x, pos + 1, out, true, 21 - spec.local);
    sum.indexed += t.indexed;
    sum.sampled += t.sampled;
  };
  for (size_t l = 0; l < s.n_layers; ++l)
    att->Forward(l, 0, 20, x.q[l].data(), x.k[l].data(), x.v[l].data(), scratch.data(), pool_);
  for (size_t pos = 20; pos < total; ++pos)
    decode(pos);
  // Rewind to position 37: mid-page, and behind pages already folded (up to 62) that now reach
  // into the local window. The same rows are written again; every step must match again.
  for (size_t pos = 37; pos < 45; ++pos)
    decode(pos);
  const AttentionStats st = att->stats();
  EXPECT_EQ(st.decode_steps, total - 20 + 8);
  EXPECT_EQ(st.indexed, sum.indexed);
  EXPECT_EQ(st.sampled, sum.sampled);
  // Reset, then a fresh prefill of a different sequence over the same positions.
  att->Reset();
  const Data y = MakeData(s, 50, 123);
  const auto out = Decode(*att, y, 50, pool_);
  Check(spec, s, y, 50, out);
}

// LoadPrefix: decoding after taking a prefix from another cache equals decoding after one's own
// prefill, bit for bit.
TEST_P(BudgetAttentionTest, LoadPrefixEqualsOwnPrefill) {
  const auto [method, dtype] = GetParam();
  const AttentionShape s = Shape();
  const AttentionSpec spec = Spec(method, dtype, 0.1);
  const size_t n = 90;
  const Data x = MakeData(s, n, 4242);
  auto own = MakeBudgetAttention(spec, s);
  const auto expect = Decode(*own, x, n, pool_);

  AttentionSpec other_spec = spec;
  other_spec.method = pig::spec::Method::topk;
  auto other = MakeBudgetAttention(other_spec, s);
  Decode(*other, x, n, pool_);
  auto loaded = MakeBudgetAttention(spec, s);
  // Garbage first: LoadPrefix must forget it.
  Decode(*loaded, MakeData(s, 40, 1), 40, pool_);
  loaded->LoadPrefix(other->cache(), n - 1);
  const size_t d = s.head_dim, qw = s.n_heads * d, kw = s.n_kv_heads * d;
  for (size_t l = 0; l < s.n_layers; ++l) {
    std::vector<float> out(qw);
    loaded->Forward(l, n - 1, 1, x.q[l].data() + (n - 1) * qw, x.k[l].data() + (n - 1) * kw,
                    x.v[l].data() + (n - 1) * kw, out.data(), pool_);
    EXPECT_EQ(out, expect[l]) << "layer " << l;
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, BudgetAttentionTest,
                         ::testing::Combine(::testing::Values("topk", "oracle", "quest",
                                                              "lsh-hybrid"),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto &info) {
                           std::string m = std::get<0>(info.param);
                           std::replace(m.begin(), m.end(), '-', '_');
                           return m + "_" + lsh::to_string(std::get<1>(info.param));
                         });

TEST(BudgetAttention, FullBudgetTopkIsDense) {
  ThreadPool pool(2);
  const AttentionShape s = Shape();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const size_t n = 80;
    const AttentionSpec spec = Spec("topk", dtype, 1.0);
    const Data x = MakeData(s, n, 31);
    auto att = MakeBudgetAttention(spec, s);
    const auto out = Decode(*att, x, n, pool);
    for (size_t l = 0; l < s.n_layers; ++l)
      for (size_t h = 0; h < s.n_heads; ++h) {
        const size_t kvh = h / s.group(), d = s.head_dim;
        const ref::Attention dense = ref::dense_attention(
            std::span<const float>(x.q[l].data() + ((n - 1) * s.n_heads + h) * d, d),
            Rows(x.k[l], s, kvh, n, dtype), Rows(x.v[l], s, kvh, n, dtype));
        EXPECT_LE(ref::relative_l2_error({out[l].data() + h * d, d}, dense.out), 1e-5);
      }
    EXPECT_EQ(att->stats().sampled, att->stats().indexed);
    EXPECT_DOUBLE_EQ(att->stats().cost2(), 1.0);
  }
}

// A small budget really is sparse: it differs from dense attention, and the error shrinks as the
// budget grows (topk: a larger budget keeps a superset of the mass).
TEST(BudgetAttention, SmallBudgetIsNotDense) {
  ThreadPool pool(2);
  const AttentionShape s = Shape();
  const size_t n = 200, d = s.head_dim;
  const Data x = MakeData(s, n, 77);
  double prev = 1e9;
  for (double budget : {0.02, 0.2, 0.6}) {
    auto att = MakeBudgetAttention(Spec("topk", DType::f32, budget), s);
    const auto out = Decode(*att, x, n, pool);
    const ref::Attention dense =
        ref::dense_attention(std::span<const float>(x.q[0].data() + (n - 1) * s.n_heads * d, d),
                             Rows(x.k[0], s, 0, n, DType::f32), Rows(x.v[0], s, 0, n, DType::f32));
    const double err = ref::relative_l2_error({out[0].data(), d}, dense.out);
    EXPECT_GT(err, 0.0);
    EXPECT_LT(err, prev);
    prev = err;
  }
}

TEST(BudgetAttention, OracleIsReproducibleBySeed) {
  ThreadPool pool(2);
  const AttentionShape s = Shape();
  const size_t n = 150;
  const Data x = MakeData(s, n, 5);
  AttentionSpec spec = Spec("oracle", DType::bf16, 0.05);
  auto a = MakeBudgetAttention(spec, s);
  auto b = MakeBudgetAttention(spec, s);
  const auto oa = Decode(*a, x, n, pool), ob = Decode(*b, x, n, pool);
  EXPECT_EQ(oa, ob);
  EXPECT_EQ(a->stats().sampled, b->stats().sampled);
  spec.sample_seed = 8;
  auto c = MakeBudgetAttention(spec, s);
  const auto oc = Decode(*c, x, n, pool);
  EXPECT_NE(oa[0], oc[0]); // sparse layer 0: different draws
  EXPECT_EQ(oa[1], oc[1]); // dense layer 1: no draws
  // Different heads, layers and steps draw differently.
  EXPECT_NE(OracleSeed(7, 0, 0, 10), OracleSeed(7, 0, 1, 10));
  EXPECT_NE(OracleSeed(7, 0, 0, 10), OracleSeed(7, 1, 0, 10));
  EXPECT_NE(OracleSeed(7, 0, 0, 10), OracleSeed(7, 0, 0, 11));
}

TEST(BudgetAttention, StatsAndMemory) {
  ThreadPool pool(2);
  const AttentionShape s = Shape();
  const size_t n = 100; // indexed = 100 - 12 = 88 per head, m = round(8.8) = 9
  const Data x = MakeData(s, n, 8);
  auto topk = MakeBudgetAttention(Spec("topk", DType::bf16, 0.1), s);
  Decode(*topk, x, n, pool);
  const AttentionStats st = topk->stats();
  // Two sparse layers (1 is dense) x 4 heads.
  EXPECT_EQ(st.decode_steps, 1u);
  EXPECT_EQ(st.indexed, 8 * 88.0);
  EXPECT_EQ(st.sampled, 8 * 9.0);
  EXPECT_EQ(st.kv_bytes_indexed, 8 * 88.0 * 2 * 16 * 2);
  EXPECT_NE(st.kernels.find("topk"), std::string::npos);
  EXPECT_EQ(st.index_bytes, 0u);

  auto quest = MakeBudgetAttention(Spec("quest", DType::f32, 0.1), s);
  Decode(*quest, x, n, pool);
  const AttentionStats sq = quest->stats();
  // 88 tokens = 22 pages of 4; ceil(9 / 4) = 3 pages = 12 tokens per head.
  EXPECT_EQ(sq.sampled, 8 * 12.0);
  // sparse layers x kv-heads x pages x (min, max) x d floats; the dense layer keeps none.
  EXPECT_EQ(sq.index_bytes, 2u * 2 * 22 * 2 * 16 * 4);
  EXPECT_EQ(sq.index_bytes_read, 8 * 22.0 * 2 * 16 * 4);
  EXPECT_GE(quest->MemoryBytes(), quest->cache().MemoryBytes() + sq.index_bytes);

  EXPECT_EQ(BudgetTokens(0.1, 0), 0u);
  EXPECT_EQ(BudgetTokens(0.001, 10), 1u);
  EXPECT_EQ(BudgetTokens(0.25, 10), 3u); // 2.5 rounds away from zero
  EXPECT_EQ(BudgetTokens(1.0, 10), 10u);
}

TEST(BudgetAttention, RejectsInvalidSpecs) {
  const AttentionShape s = Shape();
  EXPECT_THROW(MakeBudgetAttention(Spec("dense", DType::f32), s), std::invalid_argument);
  EXPECT_THROW(MakeBudgetAttention(Spec("magicpig", DType::f32), s), std::invalid_argument);
  AttentionSpec spec = Spec("quest", DType::f32);
  spec.quest_page = 0;
  EXPECT_THROW(MakeBudgetAttention(spec, s), std::invalid_argument);
  spec = Spec("topk", DType::f32, 0.0);
  EXPECT_THROW(MakeBudgetAttention(spec, s), std::invalid_argument);
  spec = Spec("oracle", DType::f32);
  spec.dense_layers = {3};
  EXPECT_THROW(MakeBudgetAttention(spec, s), std::invalid_argument);
  spec = Spec("lsh-hybrid", DType::f32);
  spec.hybrid.bits = spec.K * spec.L + 1; // more ranker bits than the codes hold
  EXPECT_THROW(MakeBudgetAttention(spec, s), std::invalid_argument);
  spec = Spec("lsh-hybrid", DType::f32);
  spec.hybrid.floor = 0; // a tail token that can never be drawn
  EXPECT_THROW(MakeBudgetAttention(spec, s), std::invalid_argument);
  spec = Spec("lsh-hybrid", DType::f32);
  spec.hybrid.head_share = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(MakeBudgetAttention(spec, s), std::invalid_argument);
  spec = Spec("lsh-hybrid", DType::f32);
  spec.hybrid.candidates = spec.L + 1; // more collisions than there are tables
  EXPECT_THROW(MakeBudgetAttention(spec, s), std::invalid_argument);
  // What pig::ref has and the runtime refuses, with a message that names it (not run as
  // something else): the low-rank ranker, the cascade, rank=quant's other forms, a reused
  // selection.
  struct Refused {
    const char *hybrid, *message;
  };
  for (const Refused &r : {Refused{"rank=lowrank", "lowrank"},
                           Refused{"pre=0.1", "pre (the coarse-then-full cascade)"},
                           Refused{"rank=quant:kbits=8", "rank=quant runs with int4 keys"},
                           Refused{"rank=quant:cand=1", "rank=quant runs with int4 keys"},
                           Refused{"reuse=2", "reuse (a selection attended by later steps)"}}) {
    spec = Spec("lsh-hybrid", DType::f32);
    spec.hybrid = ref::HybridConfig::parse(r.hybrid);
    try {
      MakeBudgetAttention(spec, s);
      ADD_FAILURE() << r.hybrid << " accepted";
    } catch (const std::invalid_argument &e) {
      EXPECT_NE(std::string(e.what()).find(r.message), std::string::npos) << e.what();
    }
  }
}

// The ranker's options run the same code as the reference's: |v| (folded once per token), a
// shorter Hamming sketch, collision counts, candidates only (the rest drawn by skips), and the
// growing tail (eps > 0: the same doublings, so the same sampled counts).
TEST(BudgetAttention, HybridRankerOptionsMatchReference) {
  ThreadPool pool(2);
  const AttentionShape s = Shape();
  const size_t n = 101;
  const Data x = MakeData(s, n, 31);
  for (const char *h : {"vnorm=1", "bits=37", "rank=collisions:head=0.5", "cand=1", "cand=2",
                        "eps=0.05:cap=0.6", "eps=0.01:head=0.5:cap=1", "eps=0.2:cand=1",
                        "rank=quant", "rank=quant:vnorm=1:head=0.1", "rank=quant:eps=0.05:cap=0.6"})
    for (DType dtype : {DType::bf16, DType::f32}) {
      AttentionSpec spec = Spec("lsh-hybrid", dtype, 0.2);
      spec.hybrid = ref::HybridConfig::parse(h);
      auto att = MakeBudgetAttention(spec, s);
      const auto out = Decode(*att, x, n, pool);
      const Totals t = Check(spec, s, x, n, out);
      EXPECT_EQ(att->stats().sampled, t.sampled) << h;
    }
  // rank=quant across decode steps and a rewind: the int4 keys are folded in step by step with
  // the mean of the first step, and truncated.
  AttentionSpec spec = Spec("lsh-hybrid", DType::bf16, 0.15);
  spec.hybrid = ref::HybridConfig::parse("rank=quant");
  auto att = MakeBudgetAttention(spec, s);
  const size_t d = s.head_dim, qw = s.n_heads * d, kw = s.n_kv_heads * d;
  std::vector<float> scratch(n * qw);
  for (size_t l = 0; l < s.n_layers; ++l)
    att->Forward(l, 0, 40, x.q[l].data(), x.k[l].data(), x.v[l].data(), scratch.data(), pool);
  auto decode = [&](size_t pos) {
    std::vector<std::vector<float>> out(s.n_layers, std::vector<float>(qw));
    for (size_t l = 0; l < s.n_layers; ++l)
      att->Forward(l, pos, 1, x.q[l].data() + pos * qw, x.k[l].data() + pos * kw,
                   x.v[l].data() + pos * kw, out[l].data(), pool);
    Check(spec, s, x, pos + 1, out, true, 41 - spec.local); // the mean of the first step's
  };
  for (size_t pos = 40; pos < 60; ++pos)
    decode(pos);
  for (size_t pos = 45; pos < 50; ++pos) // rewind
    decode(pos);
}

// The cut (ref::HybridConfig::cut). rank=quant without |v| takes the sparse path: it scores only
// the tokens it lists from f32 passes over the key scales and integer sums, and must select and
// attend what the reference selects and attends; the other rankers (and |v|) apply the cut to
// every token's score. `ranked` tells the paths apart: below `indexed` only when tokens were
// left unlisted.
TEST(BudgetAttention, HybridCutMatchesReference) {
  ThreadPool pool(2);
  const AttentionShape s = Shape();
  const size_t n = 101;
  const Data x = MakeData(s, n, 53);
  struct Run {
    const char *spec;
    bool sparse;
  };
  for (const Run &r :
       {Run{"rank=quant:cut=1", true}, Run{"rank=quant:cut=1.5:head=0.1", true},
        Run{"rank=quant:cut=2:eps=0.05:cap=0.6", true}, Run{"rank=quant:cut=0.5:head=0", true},
        Run{"rank=quant:cut=1:vnorm=1", false}, Run{"cut=1", false},
        Run{"rank=collisions:cut=0.5", false}})
    for (DType dtype : {DType::bf16, DType::f32}) {
      AttentionSpec spec = Spec("lsh-hybrid", dtype, 0.2);
      spec.hybrid = ref::HybridConfig::parse(r.spec);
      auto att = MakeBudgetAttention(spec, s);
      const auto out = Decode(*att, x, n, pool);
      const Totals t = Check(spec, s, x, n, out);
      const AttentionStats st = att->stats();
      EXPECT_EQ(st.sampled, t.sampled) << r.spec;
      if (r.sparse) {
        EXPECT_LT(st.ranked, st.indexed) << r.spec;
      } else {
        EXPECT_EQ(st.ranked, st.indexed) << r.spec;
      }
    }
}

// The sparse path's branches, on keys along one axis (so that the int4 keys and their scores are
// exact multiples of the chosen values a_i, in logit units: s_i = a_i - mean), with a head of 2
// (positions 20 and 50 score 10) and cut = 1. Its first listing is from 10 - 1 = 9:
//   relist: a token at 9.25 is listed too, so the tail's best is 9.25, and the path lists again
//           from 8.25, which adds the two at 8.5: 5 tokens per head;
//   widen:  only the head is within 1 of the best, so the path lists from 10 - 2 = 8: the head
//           and three tokens at 8.5, 5 per head;
//   give up: the rest is 40 below, under every listing tried (1, 2, 4, 8 and 16 below the
//           best): every token is scored.
// All three equal the reference.
TEST(BudgetAttention, HybridCutSparsePathsOnPeakedScores) {
  ThreadPool pool(2);
  const AttentionShape s = Shape();
  const size_t n = 101, d = s.head_dim;
  enum class Case { relist, widen, give_up };
  for (Case c : {Case::relist, Case::widen, Case::give_up}) {
    Data x = MakeData(s, n, 5);
    auto value = [c](size_t i) -> float {
      if (i == 20 || i == 50)
        return 10.0f;
      if (c == Case::relist && i == 30)
        return 9.25f;
      if (c != Case::give_up && (i == 31 || i == 60 || (c == Case::widen && i == 30)))
        return 8.5f;
      return (c == Case::give_up ? -30.0f : 0.0f) + float(i % 4) * 0.25f;
    };
    for (size_t l = 0; l < s.n_layers; ++l) {
      std::fill(x.k[l].begin(), x.k[l].end(), 0.0f);
      for (size_t i = 0; i < n; ++i)
        for (size_t kvh = 0; kvh < s.n_kv_heads; ++kvh)
          x.k[l][(i * s.n_kv_heads + kvh) * d] = value(i);
      std::fill(x.q[l].begin(), x.q[l].end(), 0.0f);
      for (size_t i = 0; i < n * s.n_heads; ++i) // q = 4 e_0: s_i = (4 / sqrt 16) a_i
        x.q[l][i * d] = 4.0f;
    }
    AttentionSpec spec = Spec("lsh-hybrid", DType::bf16, 0.2);
    spec.hybrid = ref::HybridConfig::parse("rank=quant:cut=1:head=0.1"); // a head of 2
    auto att = MakeBudgetAttention(spec, s);
    const auto out = Decode(*att, x, n, pool);
    const Totals t = Check(spec, s, x, n, out);
    const AttentionStats st = att->stats();
    EXPECT_EQ(st.sampled, t.sampled) << int(c);
    if (c == Case::give_up) {
      EXPECT_EQ(st.ranked, st.indexed);
    } else {
      EXPECT_EQ(st.ranked, 8 * 5.0) << int(c); // 2 sparse layers x 4 heads
    }
  }
}

// A NaN in one key (NaN in): the centring mean, every centred key's norm and so every score turn
// NaN, i.e. unscored (-inf), in the runtime as in the reference, and whatever attends to the NaN
// row outputs NaN. Each head must equal the reference: NaN where it is NaN, else within 1e-5.
TEST(BudgetAttention, HybridNaNKeyIsTheReferences) {
  ThreadPool pool(2);
  const AttentionShape s = Shape();
  const size_t n = 77, d = s.head_dim;
  for (size_t pos : {2, 30}) { // a sink token; an indexed one
    Data x = MakeData(s, n, 91);
    for (auto &k : x.k)
      k[(pos * s.n_kv_heads + 1) * d + 5] = std::numeric_limits<float>::quiet_NaN(); // kv-head 1
    for (const char *h : {"head=0.25", "cand=1", "rank=quant"}) {
      AttentionSpec spec = Spec("lsh-hybrid", DType::bf16, 0.2);
      spec.hybrid = ref::HybridConfig::parse(h);
      auto att = MakeBudgetAttention(spec, s);
      const auto out = Decode(*att, x, n, pool);
      const auto dense = spec.DenseLayers(s.n_layers);
      size_t nan_heads = 0;
      for (size_t l = 0; l < s.n_layers; ++l) {
        if (std::find(dense.begin(), dense.end(), l) != dense.end())
          continue;
        for (size_t hd = 0; hd < s.n_heads; ++hd) {
          const Expected e = Reference(spec, s, x, n, l, hd);
          const std::span<const float> got(out[l].data() + hd * d, d);
          const bool want_nan = std::any_of(e.attention.out.begin(), e.attention.out.end(),
                                            [](float v) { return std::isnan(v); });
          const bool got_nan =
              std::any_of(got.begin(), got.end(), [](float v) { return std::isnan(v); });
          EXPECT_EQ(got_nan, want_nan) << h << " pos=" << pos << " layer=" << l << " head=" << hd;
          if (!want_nan && !got_nan) {
            EXPECT_LE(ref::relative_l2_error(got, e.attention.out), 1e-5)
                << h << " pos=" << pos << " layer=" << l << " head=" << hd;
          }
          nan_heads += want_nan;
        }
      }
      if (pos == 2) { // a sink token is attended by every head of its kv-head
        EXPECT_GT(nan_heads, 0u) << h;
      }
    }
  }
}

TEST(BudgetAttention, HybridStats) {
  ThreadPool pool(2);
  const AttentionShape s = Shape();
  const size_t n = 100; // 88 indexed tokens per head
  const Data x = MakeData(s, n, 8);
  auto h = MakeBudgetAttention(Spec("lsh-hybrid", DType::bf16, 0.1), s);
  Decode(*h, x, n, pool);
  const AttentionStats st = h->stats();
  EXPECT_EQ(st.indexed, 8 * 88.0);
  EXPECT_GT(st.sampled, 8 * 2.0); // the head alone: round(0.25 * 8.8) = 2 per head
  EXPECT_LT(st.sampled, 8 * 20.0);
  // 2 sparse layers x 2 kv-heads x 88 tokens x (1500 bits packed in 24 words + a double norm)
  EXPECT_EQ(st.index_bytes, 2u * 2 * 88 * (24 * 8 + 8));
  // read: each of the G = 2 heads of a kv-head half of the group's one pass, and its norms
  EXPECT_EQ(st.index_bytes_read, 8 * 88.0 * (24 * 8 / 2 + 8));
  EXPECT_NE(st.kernels.find("lsh-hybrid"), std::string::npos);
  EXPECT_GE(h->MemoryBytes(), h->cache().MemoryBytes() + st.index_bytes);
  // rank=quant: d / 2 bytes of int4 key (in whole blocks of 16 tokens: 96 for 88) and a float
  // scale per token, no norm.
  AttentionSpec qs = Spec("lsh-hybrid", DType::bf16, 0.1);
  qs.hybrid = ref::HybridConfig::parse("rank=quant");
  auto quant = MakeBudgetAttention(qs, s);
  Decode(*quant, x, n, pool);
  const AttentionStats qst = quant->stats();
  EXPECT_EQ(qst.index_bytes, 2u * 2 * (96 * 16 / 2 + 88 * 4));
  EXPECT_EQ(qst.index_bytes_read, 8 * 88.0 * (16 / 2 + 4) / 2);
  EXPECT_NE(qst.kernels.find("int4-key scan"), std::string::npos) << qst.kernels;
}

} // namespace
} // namespace pig::runtime
