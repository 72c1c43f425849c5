// The q8 KV cache (8-bit rows, a bf16 scale per 32 elements: pig/reference/kv_quant.h) in the
// runtime: KvCache stores pig::ref::quantize_q8 of what it is given, reads back its
// dequantisation, converts between element types in CopyPrefix and Tile, and sizes its memory at
// 34 bytes per 32 elements; and every method (dense, magicpig, topk, quest, oracle, lsh-hybrid)
// decoding from a q8 cache equals the same method decoding from an f32 cache that holds the
// dequantised rows (a q8 element is q * s, exact in f32: both read the same numbers). Synthetic
// shapes, no model.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/reference/attention.h"
#include "pig/reference/kv_quant.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/budget_attention.h"
#include "pig/runtime/kv_cache.h"
#include "pig/runtime/lsh_attention.h"

namespace pig::runtime {
namespace {

using lsh::DType;

// One row through q8 and back: what a q8 cache reads back for it.
std::vector<float> Q8Round(const float *x, size_t d) {
  std::vector<std::uint8_t> q(ref::q8_row_bytes(d));
  std::vector<float> y(d);
  ref::quantize_q8(x, d, q.data());
  ref::dequantize_q8(q.data(), d, y.data());
  return y;
}

std::vector<float> Bf16Round(const float *x, size_t d) {
  std::vector<std::uint16_t> b(d);
  std::vector<float> y(d);
  lsh::convert_to_bf16(x, b.data(), d);
  lsh::convert_from_bf16(b.data(), y.data(), d);
  return y;
}

// Equal bit for bit (NaN payloads included: a NaN block reads back the same NaN everywhere).
void ExpectSameBits(const std::vector<float> &got, const std::vector<float> &want,
                    const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t j = 0; j < got.size(); ++j)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[j]), std::bit_cast<std::uint32_t>(want[j]))
        << what << " element " << j << ": " << got[j] << " vs " << want[j];
}

// n positions of (n_kv_heads * d) floats: gaussian, an outlier channel, a zero row, a huge and a
// tiny row, and a NaN in one block.
std::vector<float> KvRows(size_t n, size_t kvh, size_t d, std::uint64_t seed) {
  std::mt19937 rng{unsigned(seed)};
  std::normal_distribution<float> nd;
  std::vector<float> x(n * kvh * d);
  for (auto &e : x)
    e = nd(rng);
  for (size_t i = 0; i < n * kvh; ++i)
    x[i * d + 3] = 20.0f + x[i * d + 3];
  if (n > 3) {
    std::fill(x.begin(), x.begin() + std::ptrdiff_t(d), 0.0f);
    for (size_t j = 0; j < d; ++j) {
      x[d + j] *= 1e30f;
      x[2 * d + j] *= 1e-30f;
    }
    x[3 * d + d - 2] = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

AttentionShape CacheShape(size_t d = 64, size_t cap = 12) {
  AttentionShape s;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = d;
  s.capacity = cap;
  return s;
}

TEST(KvCacheQ8, AppendStoresQuantisedRows) {
  for (size_t d : {32, 64, 128}) {
    const AttentionShape s = CacheShape(d);
    KvCache c(s, DType::q8);
    EXPECT_EQ(c.dtype(), DType::q8);
    EXPECT_EQ(c.RowBytes(), d / 32 * 34);
    EXPECT_EQ(c.BytesPerToken(), 2 * s.n_layers * s.n_kv_heads * (d / 32 * 34));
    // Blocks are taken as positions are stored: none yet, the capacity's (rounded up) reserved.
    EXPECT_EQ(c.MemoryBytes(), 0u);
    EXPECT_EQ(c.ReservedBytes(), 2 * s.n_layers * s.n_kv_heads * KvPool::BlocksFor(s.capacity) *
                                     kKvBlockTokens * (d / 32 * 34));
    const size_t n = 7, pos = 3, kvh = s.n_kv_heads;
    const std::vector<float> k = KvRows(n, kvh, d, 1 + d), v = KvRows(n, kvh, d, 2 + d);
    c.Append(1, pos, n, k.data(), v.data());
    std::vector<float> row(d);
    for (size_t i = 0; i < n; ++i)
      for (size_t h = 0; h < kvh; ++h) {
        const std::string what = "d=" + std::to_string(d) + " pos " + std::to_string(pos + i) +
                                 " kv-head " + std::to_string(h);
        const float *ks = &k[(i * kvh + h) * d], *vs = &v[(i * kvh + h) * d];
        c.KeyRow(1, h, pos + i, row.data());
        ExpectSameBits(row, Q8Round(ks, d), what + " key");
        c.ValueRow(1, h, pos + i, row.data());
        ExpectSameBits(row, Q8Round(vs, d), what + " value");
        // The raw rows the kernels read: quantize_q8's bytes at row pos of the (layer, kv-head).
        std::vector<std::uint8_t> want(ref::q8_row_bytes(d));
        ref::quantize_q8(ks, d, want.data());
        const auto *raw = static_cast<const std::uint8_t *>(c.KeyAt(1, h, pos + i));
        EXPECT_EQ(std::memcmp(raw, want.data(), want.size()), 0) << what;
      }
    // Layer 0 and the positions around the appended ones are untouched (zeros).
    c.KeyRow(1, 0, pos - 1, row.data());
    EXPECT_TRUE(std::all_of(row.begin(), row.end(), [](float x) { return x == 0.0f; }));
    c.KeyRow(0, 1, pos, row.data());
    EXPECT_TRUE(std::all_of(row.begin(), row.end(), [](float x) { return x == 0.0f; }));
  }
}

// Non-finite elements (kv_cache.h): a q8 block holding a NaN, an infinity or a -infinity is
// stored with the scale NaN and codes 0 (every element of the block reads back NaN); the row's
// other blocks are quantised as usual; f32 keeps the values and bf16 their bf16 spelling.
TEST(KvCacheQ8, NonFiniteBlocksAreStoredAsNaN) {
  const size_t d = 128;
  const AttentionShape s = CacheShape(d);
  std::vector<float> k(s.n_kv_heads * d), v(s.n_kv_heads * d);
  std::mt19937 rng{7};
  std::normal_distribution<float> nd;
  for (auto &x : k)
    x = nd(rng);
  v = k;
  k[0 * 32 + 5] = std::numeric_limits<float>::quiet_NaN(); // kv-head 0, block 0
  k[2 * 32 + 31] = std::numeric_limits<float>::infinity(); // block 2
  k[d + 3 * 32] = -std::numeric_limits<float>::infinity(); // kv-head 1, block 3
  for (DType t : {DType::q8, DType::bf16, DType::f32}) {
    KvCache c(s, t);
    c.Append(0, 4, 1, k.data(), v.data());
    std::vector<float> row(d);
    for (size_t h = 0; h < s.n_kv_heads; ++h) {
      c.KeyRow(0, h, 4, row.data());
      for (size_t j = 0; j < d; ++j) {
        const float x = k[h * d + j];
        const size_t b = j / 32;
        const bool poisoned = (h == 0 && (b == 0 || b == 2)) || (h == 1 && b == 3);
        const std::string what = std::string(lsh::to_string(t)) + " kv-head " + std::to_string(h) +
                                 " element " + std::to_string(j);
        if (t == DType::q8 && poisoned)
          ASSERT_TRUE(std::isnan(row[j])) << what;
        else if (std::isnan(x))
          ASSERT_TRUE(std::isnan(row[j])) << what;
        else if (std::isinf(x))
          ASSERT_EQ(row[j], x) << what;
        else
          ASSERT_NEAR(row[j], x, t == DType::q8 ? 0.05 : 0.01 * std::fabs(x)) << what;
      }
      if (t == DType::q8) { // the raw scale of each poisoned block is NaN, its codes 0
        const auto *raw = static_cast<const std::uint8_t *>(c.KeyAt(0, h, 4));
        for (size_t b = 0; b < d / 32; ++b) {
          const bool poisoned = (h == 0 && (b == 0 || b == 2)) || (h == 1 && b == 3);
          EXPECT_EQ(std::isnan(ref::q8_block_scale(raw + b * 34)), poisoned) << "block " << b;
          for (size_t i = 0; poisoned && i < 32; ++i)
            EXPECT_EQ(raw[b * 34 + 2 + i], 0) << "block " << b;
        }
      }
      c.ValueRow(0, h, 4, row.data()); // the values are finite: every block too
      for (size_t j = 0; j < d; ++j)
        ASSERT_TRUE(std::isfinite(row[j])) << lsh::to_string(t) << " value " << j;
    }
  }
}

TEST(KvCacheQ8, SizesAgainstOtherTypes) {
  const AttentionShape s = CacheShape(128, 1000);
  const KvCache q8(s, DType::q8), bf16(s, DType::bf16), f32(s, DType::f32);
  EXPECT_EQ(q8.BytesPerToken(), 2u * 2 * 2 * 136);
  EXPECT_EQ(bf16.BytesPerToken(), 2u * 2 * 2 * 256);
  EXPECT_EQ(f32.BytesPerToken(), 2u * 2 * 2 * 512);
  const size_t positions = KvPool::BlocksFor(1000) * kKvBlockTokens; // whole blocks
  EXPECT_EQ(q8.ReservedBytes(), q8.BytesPerToken() * positions);
  EXPECT_EQ(bf16.ReservedBytes() * 17, q8.ReservedBytes() * 32); // 34 / 64 of bf16
  EXPECT_EQ(KvCache::BytesFor(s, DType::q8), q8.ReservedBytes());
}

TEST(KvCacheQ8, HeadDimMustBeAMultipleOf32) {
  for (size_t d : {80, 48, 16, 66}) {
    try {
      KvCache c(CacheShape(d), DType::q8);
      ADD_FAILURE() << "q8 cache with head dim " << d << " accepted";
    } catch (const std::invalid_argument &e) {
      EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(d)), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(KvCache(CacheShape(d), DType::bf16));
  }
  // The attention factories refuse it too (no kernel serves it).
  for (const char *method : {"dense", "magicpig", "topk", "quest", "oracle", "lsh-hybrid"}) {
    AttentionSpec spec;
    spec.method = *pig::spec::parse_method(method);
    spec.kv_dtype = DType::q8;
    EXPECT_THROW(MakeAttention(spec, CacheShape(80, 64)), std::invalid_argument) << method;
    EXPECT_NO_THROW(MakeAttention(spec, CacheShape(96, 64))) << method;
  }
}

// CopyPrefix and Tile between element types: the destination holds what Append of the source's
// rows as f32 would have stored (q8: quantize_q8 of them; from q8: their dequantisation, rounded
// to bf16 for a bf16 destination); between q8 caches the bytes are copied.
TEST(KvCacheQ8, CopyPrefixAndTileConvert) {
  const size_t d = 64, n = 9;
  const AttentionShape s = CacheShape(d, 12);
  const size_t kvh = s.n_kv_heads;
  // Between caches of one type the rows are copied as they are (re-quantising a q8 row's
  // dequantisation is not the identity: its scale is rounded up again).
  auto to = [&](DType src_t, DType dt, const std::vector<float> &x) {
    if (src_t == dt)
      return x;
    return dt == DType::q8 ? Q8Round(x.data(), d) : dt == DType::bf16 ? Bf16Round(x.data(), d) : x;
  };
  for (DType src_t : {DType::f32, DType::bf16, DType::q8})
    for (DType dst_t : {DType::f32, DType::bf16, DType::q8}) {
      const std::string what = std::string(lsh::to_string(src_t)) + " -> " + lsh::to_string(dst_t);
      KvCache src(s, src_t);
      for (size_t l = 0; l < s.n_layers; ++l) {
        const std::vector<float> k = KvRows(n, kvh, d, 10 + l), v = KvRows(n, kvh, d, 20 + l);
        src.Append(l, 0, n, k.data(), v.data());
      }
      KvCache prefix(s, dst_t), tiled(s, dst_t);
      prefix.CopyPrefix(src, n - 2);
      const size_t period = 4;
      tiled.Tile(src, period, 11);
      std::vector<float> a(d), b(d);
      for (size_t l = 0; l < s.n_layers; ++l)
        for (size_t h = 0; h < kvh; ++h) {
          for (size_t i = 0; i < n - 2; ++i) {
            src.KeyRow(l, h, i, a.data());
            prefix.KeyRow(l, h, i, b.data());
            ExpectSameBits(b, to(src_t, dst_t, a), what + " prefix key " + std::to_string(i));
            src.ValueRow(l, h, i, a.data());
            prefix.ValueRow(l, h, i, b.data());
            ExpectSameBits(b, to(src_t, dst_t, a), what + " prefix value " + std::to_string(i));
          }
          prefix.KeyRow(l, h, n - 2, b.data()); // past the prefix: untouched
          EXPECT_TRUE(std::all_of(b.begin(), b.end(), [](float x) { return x == 0.0f; })) << what;
          for (size_t i = 0; i < 11; ++i) {
            src.KeyRow(l, h, i % period, a.data());
            tiled.KeyRow(l, h, i, b.data());
            ExpectSameBits(b, to(src_t, dst_t, a), what + " tiled key " + std::to_string(i));
            src.ValueRow(l, h, i % period, a.data());
            tiled.ValueRow(l, h, i, b.data());
            ExpectSameBits(b, to(src_t, dst_t, a), what + " tiled value " + std::to_string(i));
          }
          if (src_t == dst_t) {
            const size_t rb = src.RowBytes();
            for (size_t i = 0; i < n - 2; ++i)
              EXPECT_EQ(std::memcmp(prefix.KeyAt(l, h, i), src.KeyAt(l, h, i), rb), 0) << what;
          }
        }
      EXPECT_THROW(prefix.CopyPrefix(src, 13), std::runtime_error) << what;
      EXPECT_THROW(tiled.Tile(src, period, 13), std::runtime_error) << what;
    }
  // A q8 destination from f32 rows equals Append of the same rows, byte for byte.
  const std::vector<float> k = KvRows(n, kvh, d, 31), v = KvRows(n, kvh, d, 32);
  KvCache f32(s, DType::f32), direct(s, DType::q8), copied(s, DType::q8);
  for (size_t l = 0; l < s.n_layers; ++l) {
    f32.Append(l, 0, n, k.data(), v.data());
    direct.Append(l, 0, n, k.data(), v.data());
  }
  copied.CopyPrefix(f32, n);
  for (size_t l = 0; l < s.n_layers; ++l)
    for (size_t h = 0; h < kvh; ++h) {
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(std::memcmp(copied.KeyAt(l, h, i), direct.KeyAt(l, h, i), direct.RowBytes()), 0);
        EXPECT_EQ(std::memcmp(copied.ValueAt(l, h, i), direct.ValueAt(l, h, i), direct.RowBytes()),
                  0);
      }
    }
}

// ---- every method on a q8 cache vs an f32 cache of the dequantised rows ----------------------

struct Sequence {
  // Per layer: q is n x (n_heads d), k and v are n x (n_kv_heads d).
  std::vector<std::vector<float>> q, k, v;
};

// Keys in a cone (a common offset plus noise) with an outlier channel, like a real model's.
Sequence MakeSequence(const AttentionShape &s, size_t n, std::uint64_t seed) {
  std::mt19937 rng{unsigned(seed)};
  std::normal_distribution<float> nd;
  const size_t d = s.head_dim;
  std::vector<float> offset(d);
  for (auto &x : offset)
    x = 1.5f * nd(rng);
  Sequence x;
  for (size_t l = 0; l < s.n_layers; ++l) {
    std::vector<float> q(n * s.n_heads * d), k(n * s.n_kv_heads * d), v(n * s.n_kv_heads * d);
    for (auto &e : q)
      e = 0.3f * nd(rng);
    for (size_t i = 0; i < k.size(); ++i)
      k[i] = offset[i % d] + nd(rng) + (i % d == 9 ? 12.0f : 0.0f);
    for (auto &e : v)
      e = nd(rng);
    x.q.push_back(std::move(q));
    x.k.push_back(std::move(k));
    x.v.push_back(std::move(v));
  }
  return x;
}

// Every (n_kv_heads d)-row of x replaced by its q8 round trip.
std::vector<float> Dequantised(const std::vector<float> &x, size_t d) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); i += d) {
    const std::vector<float> r = Q8Round(&x[i], d);
    std::copy(r.begin(), r.end(), y.begin() + std::ptrdiff_t(i));
  }
  return y;
}

// The sequence with every key and value row replaced by its q8 round trip.
Sequence DequantisedSequence(const Sequence &raw, size_t d) {
  Sequence deq = raw;
  for (size_t l = 0; l < raw.k.size(); ++l) {
    deq.k[l] = Dequantised(raw.k[l], d);
    deq.v[l] = Dequantised(raw.v[l], d);
  }
  return deq;
}

// Prefill positions [0, prompt) of every layer, then decode [prompt, n) one by one; the decode
// outputs, per step and layer.
std::vector<std::vector<float>> Decode(Attention &att, const Sequence &x, size_t prompt, size_t n,
                                       ThreadPool &pool) {
  const AttentionShape &s = att.shape();
  const size_t d = s.head_dim, qw = s.n_heads * d, kw = s.n_kv_heads * d;
  std::vector<float> scratch(prompt * qw);
  for (size_t l = 0; l < s.n_layers; ++l)
    att.Forward(l, 0, prompt, x.q[l].data(), x.k[l].data(), x.v[l].data(), scratch.data(), pool);
  std::vector<std::vector<float>> out;
  for (size_t pos = prompt; pos < n; ++pos)
    for (size_t l = 0; l < s.n_layers; ++l) {
      out.emplace_back(qw);
      att.Forward(l, pos, 1, x.q[l].data() + pos * qw, x.k[l].data() + pos * kw,
                  x.v[l].data() + pos * kw, out.back().data(), pool);
    }
  return out;
}

double RelL2(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

struct MethodCase {
  const char *method;
  size_t d;
};

class Q8AttentionTest : public ::testing::TestWithParam<MethodCase> {
protected:
  ThreadPool pool_{2};
};

// The method on a q8 cache equals the method on an f32 cache fed the dequantised keys and
// values: the same tokens selected or sampled (equal statistics) and outputs equal up to f32
// accumulation (1e-5 relative; q8's own error vs unquantised rows is ~1e-2, checked to be there).
TEST_P(Q8AttentionTest, EqualsF32CacheOfDequantisedRows) {
  const MethodCase c = GetParam();
  const size_t layers = 3, kvh = 2, heads = 6, d = c.d, prompt = 330, steps = 40;
  const AttentionShape shape{layers, heads, kvh, d, prompt + steps};
  AttentionSpec spec;
  spec.method = *pig::spec::parse_method(c.method);
  spec.K = 8;
  spec.L = 75;
  spec.dense_layers = {1};
  spec.dense_layers_set = true;
  spec.budget = 0.1;
  spec.quest_page = 8;
  const Sequence raw = MakeSequence(shape, prompt + steps, 5 + d);
  const Sequence deq = DequantisedSequence(raw, d);
  spec.kv_dtype = DType::q8;
  auto q8 = MakeAttention(spec, shape);
  spec.kv_dtype = DType::f32;
  auto f32 = MakeAttention(spec, shape);
  auto exact = MakeAttention(spec, shape); // f32 rows, not quantised
  EXPECT_EQ(q8->cache().dtype(), DType::q8);
  const auto a = Decode(*q8, raw, prompt, prompt + steps, pool_);
  const auto b = Decode(*f32, deq, prompt, prompt + steps, pool_);
  const auto e = Decode(*exact, raw, prompt, prompt + steps, pool_);
  ASSERT_EQ(a.size(), b.size());
  double q8_error = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string what = std::string(c.method) + " d=" + std::to_string(d) + " step " +
                             std::to_string(i / layers) + " layer " + std::to_string(i % layers);
    for (float x : a[i])
      ASSERT_TRUE(std::isfinite(x)) << what;
    EXPECT_LE(RelL2(a[i], b[i]), 1e-5) << what;
    q8_error = std::max(q8_error, RelL2(a[i], e[i]));
  }
  // The q8 cache does quantise (the comparison above is not between two f32 runs).
  EXPECT_GT(q8_error, 1e-4) << c.method;
  const AttentionStats sa = q8->stats(), sb = f32->stats();
  EXPECT_EQ(sa.decode_steps, sb.decode_steps);
  EXPECT_EQ(sa.indexed, sb.indexed) << c.method;
  EXPECT_EQ(sa.sampled, sb.sampled) << c.method;
  EXPECT_EQ(sa.gathered, sb.gathered) << c.method;
  // K and V bytes of the indexed tokens: 34 bytes per 32 elements instead of 128.
  EXPECT_DOUBLE_EQ(sa.kv_bytes_indexed * 128.0, sb.kv_bytes_indexed * 34.0) << c.method;
  if (std::string(c.method) != "dense") {
    EXPECT_GT(sa.indexed, 0.0) << c.method;
    EXPECT_GT(sa.sampled, 0.0) << c.method;
  }
  // 34 / 128 of the f32 cache's memory.
  EXPECT_EQ(q8->cache().MemoryBytes() * 128, f32->cache().MemoryBytes() * 34);
}

// LoadPrefix from an f32 cache (a dense f32 prefill shared by methods, as pig-bench-context does)
// then decoding equals the method's own q8 prefill, bit for bit: the conversion quantises the same
// f32 rows Append would have.
TEST_P(Q8AttentionTest, LoadPrefixFromF32EqualsOwnPrefill) {
  const MethodCase c = GetParam();
  const size_t layers = 3, kvh = 2, heads = 6, d = c.d, prompt = 200, steps = 6;
  const AttentionShape shape{layers, heads, kvh, d, prompt + steps};
  AttentionSpec spec;
  spec.method = *pig::spec::parse_method(c.method);
  spec.K = 8;
  spec.L = 75;
  spec.kv_dtype = DType::q8;
  spec.dense_layers = {1};
  spec.dense_layers_set = true;
  spec.budget = 0.1;
  const Sequence x = MakeSequence(shape, prompt + steps, 77 + d);
  auto own = MakeAttention(spec, shape);
  const auto want = Decode(*own, x, prompt, prompt + steps, pool_);
  DenseAttention prefill(shape, DType::f32);
  std::vector<float> scratch(prompt * heads * d);
  for (size_t l = 0; l < layers; ++l)
    prefill.Forward(l, 0, prompt, x.q[l].data(), x.k[l].data(), x.v[l].data(), scratch.data(),
                    pool_);
  auto loaded = MakeAttention(spec, shape);
  loaded->LoadPrefix(prefill.cache(), prompt);
  const size_t qw = heads * d, kw = kvh * d;
  size_t i = 0;
  for (size_t pos = prompt; pos < prompt + steps; ++pos)
    for (size_t l = 0; l < layers; ++l, ++i) {
      std::vector<float> out(qw);
      loaded->Forward(l, pos, 1, x.q[l].data() + pos * qw, x.k[l].data() + pos * kw,
                      x.v[l].data() + pos * kw, out.data(), pool_);
      ASSERT_EQ(out, want[i]) << c.method << " pos " << pos << " layer " << l;
    }
}

INSTANTIATE_TEST_SUITE_P(Methods, Q8AttentionTest,
                         ::testing::Values(MethodCase{"dense", 64}, MethodCase{"dense", 128},
                                           MethodCase{"magicpig", 64}, MethodCase{"magicpig", 128},
                                           MethodCase{"topk", 64}, MethodCase{"quest", 64},
                                           MethodCase{"oracle", 64}, MethodCase{"topk", 128},
                                           MethodCase{"lsh-hybrid", 64}),
                         [](const auto &info) {
                           std::string m = info.param.method;
                           std::replace(m.begin(), m.end(), '-', '_');
                           return m + "_d" + std::to_string(info.param.d);
                         });

// Fitted hashing over a q8 cache: the fit, the index and the sampled pass read the dequantised
// rows, exactly as over an f32 cache holding them.
TEST(Q8Attention, FittedHashingEqualsF32CacheOfDequantisedRows) {
  ThreadPool pool(2);
  const size_t layers = 2, kvh = 2, heads = 6, d = 64, prompt = 300, steps = 20;
  const AttentionShape shape{layers, heads, kvh, d, prompt + steps};
  AttentionSpec spec;
  spec.method = pig::spec::Method::magicpig;
  spec.dense_layers = {0};
  spec.dense_layers_set = true;
  spec.transform = ref::TransformSpec::parse("whiten:a=0.25");
  const Sequence raw = MakeSequence(shape, prompt + steps, 91);
  const Sequence deq = DequantisedSequence(raw, d);
  spec.kv_dtype = DType::q8;
  auto q8 = MakeAttention(spec, shape);
  spec.kv_dtype = DType::f32;
  auto f32 = MakeAttention(spec, shape);
  const auto a = Decode(*q8, raw, prompt, prompt + steps, pool);
  const auto b = Decode(*f32, deq, prompt, prompt + steps, pool);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_LE(RelL2(a[i], b[i]), 1e-5) << "step " << i / layers << " layer " << i % layers;
  EXPECT_EQ(q8->stats().sampled, f32->stats().sampled);
  EXPECT_GT(q8->stats().hash_bytes, 0u);
}

// A NaN key in a q8 cache poisons the attention that reads it (as with f32 and bf16): dense
// decode returns NaN for the heads of that kv-head, and finite values for the other's.
TEST(Q8Attention, NaNKeyPropagates) {
  ThreadPool pool(2);
  const size_t kvh = 2, heads = 4, d = 64, n = 50;
  const AttentionShape shape{1, heads, kvh, d, n};
  Sequence x = MakeSequence(shape, n, 13);
  x.k[0][(20 * kvh + 1) * d + 40] = std::numeric_limits<float>::quiet_NaN(); // kv-head 1
  DenseAttention att(shape, DType::q8);
  const auto out = Decode(att, x, n - 1, n, pool);
  ASSERT_EQ(out.size(), 1u);
  for (size_t h = 0; h < heads; ++h)
    for (size_t j = 0; j < d; ++j)
      EXPECT_EQ(std::isnan(out[0][h * d + j]), h >= 2) << "head " << h << " dim " << j;
}

} // namespace
} // namespace pig::runtime
