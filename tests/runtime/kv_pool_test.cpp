// The paged KV cache (kv_cache.h): a KvPool of fixed-size blocks, caches that take blocks as they
// grow and give them back when they end, admission by blocks (Reserve), and every attention
// method reading its rows through a block table scattered in a pool shared with other sequences,
// bit for bit as over a pool of its own. Small synthetic shapes only: no model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/reference/random.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/kv_cache.h"
#include "pig/runtime/ops.h"

namespace pig::runtime {
namespace {

using lsh::DType;

AttentionShape Shape(size_t capacity) {
  AttentionShape s;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.capacity = capacity;
  return s;
}

std::vector<float> Random(size_t n, std::uint64_t seed, double offset = 0.0) {
  ref::Rng rng(seed);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = float(rng.gaussian() + (i % 64 < 4 ? offset : 0.0));
  return x;
}

// A view of an engine's blocks (vLLM's layout: per layer [blocks][kv-head][K rows | V rows][d]):
// a cache over it reads the engine's rows where its adopted table says, holds no memory of its
// own, and refuses to write or to read past its table.
TEST(KvPool, ExternalReadsTheEnginesBlocksThroughTheAdoptedTable) {
  const AttentionShape s = Shape(256);
  constexpr size_t kBs = 16, kBlocks = 8;
  const size_t rb = lsh::row_bytes(DType::f32, s.head_dim);
  std::vector<std::vector<float>> layers(s.n_layers);
  for (size_t l = 0; l < s.n_layers; ++l)
    layers[l] = Random(kBlocks * s.n_kv_heads * 2 * kBs * s.head_dim, 40 + l);
  std::shared_ptr<KvPool> pool = KvPool::External(s, DType::f32, kBs);
  EXPECT_TRUE(pool->external());
  EXPECT_THROW(pool->SetLayer(s.n_layers, layers[0].data(), kBlocks), std::invalid_argument);
  EXPECT_THROW(pool->SetLayer(0, nullptr, kBlocks), std::invalid_argument);
  for (size_t l = 0; l < s.n_layers; ++l)
    pool->SetLayer(l, layers[l].data(), kBlocks);
  KvCache c(s, DType::f32, pool);
  EXPECT_EQ(c.ReservedBytes(), 0u);
  const std::vector<std::int32_t> table = {5, 2, 7};
  // Before a table, and past it: nothing to read.
  EXPECT_THROW(c.Append(0, 0, 1, nullptr, nullptr), std::runtime_error);
  EXPECT_THROW(c.Adopt(table.data(), 2, 40), std::invalid_argument); // 40 positions: 3 blocks
  std::vector<std::int32_t> far = table;
  far[1] = kBlocks;
  EXPECT_THROW(c.Adopt(far.data(), far.size(), 40), std::invalid_argument);
  EXPECT_THROW(c.Adopt(table.data(), table.size(), s.capacity + 1), std::invalid_argument);
  c.Adopt(table.data(), table.size(), 40);
  EXPECT_EQ(c.blocks(), table);
  EXPECT_NO_THROW(c.Append(1, 39, 1, nullptr, nullptr));
  EXPECT_THROW(c.Append(1, 48, 1, nullptr, nullptr), std::runtime_error); // past 3 blocks
  const std::vector<float> k(s.n_kv_heads * s.head_dim, 1.0f);
  EXPECT_THROW(c.Append(0, 0, 1, k.data(), k.data()), std::invalid_argument); // the engine writes
  EXPECT_EQ(c.MemoryBytes(), 0u);                                             // the engine's
  for (size_t l = 0; l < s.n_layers; ++l)
    for (size_t h = 0; h < s.n_kv_heads; ++h)
      for (size_t pos : {size_t(0), size_t(17), size_t(39)}) {
        const float *blk =
            layers[l].data() + size_t(table[pos / kBs]) * s.n_kv_heads * 2 * kBs * s.head_dim;
        const float *krow = blk + (h * 2 * kBs + pos % kBs) * s.head_dim;
        EXPECT_EQ(std::memcmp(c.KeyAt(l, h, pos), krow, rb), 0) << l << " " << h << " " << pos;
        EXPECT_EQ(std::memcmp(c.ValueAt(l, h, pos), krow + kBs * s.head_dim, rb), 0);
      }
  KvCache own(s, DType::f32);
  EXPECT_THROW(own.Adopt(table.data(), table.size(), 40), std::invalid_argument);
  EXPECT_THROW(own.Append(0, 0, 1, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(c.CopyPrefix(own, 0), std::invalid_argument);
  KvPool mine(s, DType::f32, 4, 16);
  EXPECT_THROW(mine.SetLayer(0, layers[0].data(), kBlocks), std::invalid_argument);
}

TEST(KvPool, ReservesTakesAndGivesBlocks) {
  const AttentionShape s = Shape(0);
  KvPool pool(s, DType::bf16, 4, 16);
  EXPECT_EQ(pool.BlockBytes(), KvPool::BlockBytesFor(s, DType::bf16, 16));
  EXPECT_EQ(pool.BlockBytes(), 2u * 2 * 2 * 16 * 64 * 2); // layers x kv-heads x (K, V) x rows x d
  pool.Reserve(3);
  try {
    pool.Reserve(2);
    FAIL() << "a fifth block reserved in a pool of four";
  } catch (const std::length_error &e) {
    EXPECT_NE(std::string(e.what()).find("1 of 4 free"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.reserved_blocks(), 3u); // the refused reservation changed nothing
  EXPECT_EQ(pool.Take(), 0);
  EXPECT_EQ(pool.Take(), 1);
  EXPECT_EQ(pool.Take(), 2);
  EXPECT_THROW(pool.Take(), std::logic_error); // only what was reserved
  pool.Give(1);
  EXPECT_EQ(pool.Take(), 1); // the lowest free id first: committed memory stays compact
  EXPECT_EQ(pool.taken_blocks(), 3u);
  EXPECT_EQ(pool.ResidentBytes(), 3 * pool.BlockBytes());
  EXPECT_THROW(KvPool(s, DType::bf16, 4, 0), std::invalid_argument);
  AttentionShape odd = s;
  odd.head_dim = 63;
  EXPECT_THROW(KvPool(odd, DType::bf16, 4), std::invalid_argument);
}

TEST(KvCache, HoldsTheBlocksItUsesAndReturnsThem) {
  const AttentionShape s = Shape(8192);
  auto pool = std::make_shared<KvPool>(Shape(0), DType::bf16, 0);
  {
    KvCache c(s, DType::bf16, pool);
    EXPECT_EQ(c.MemoryBytes(), 0u);
    EXPECT_EQ(c.ReservedBytes(), 8192 / kKvBlockTokens * pool->BlockBytes());
    EXPECT_EQ(pool->reserved_blocks(), 8192 / kKvBlockTokens);
    const size_t n = 1000, w = s.n_kv_heads * s.head_dim;
    const std::vector<float> k = Random(n * w, 1), v = Random(n * w, 2);
    for (size_t l = 0; l < s.n_layers; ++l)
      c.Append(l, 0, n, k.data(), v.data());
    // 1000 positions of a cache of 8192 hold 16 blocks of 64, not 128.
    EXPECT_EQ(c.blocks().size(), 16u);
    EXPECT_EQ(c.MemoryBytes(), 16 * pool->BlockBytes());
    EXPECT_EQ(pool->taken_blocks(), 16u);
    EXPECT_THROW(c.Append(0, 8190, 3, k.data(), v.data()), std::runtime_error); // past capacity
    EXPECT_EQ(c.blocks().size(), 16u); // the refused append took nothing
  }
  EXPECT_EQ(pool->taken_blocks(), 0u); // the cache ended: its blocks and reservation are back
  EXPECT_EQ(pool->reserved_blocks(), 0u);

  // A bounded pool admits by blocks: a cache whose capacity does not fit is refused, whole.
  auto small = std::make_shared<KvPool>(Shape(0), DType::q8, 10);
  KvCache a(Shape(500), DType::q8, small); // 8 blocks
  EXPECT_THROW(KvCache(Shape(200), DType::q8, small), std::length_error);
  EXPECT_EQ(small->reserved_blocks(), 8u);
  EXPECT_NO_THROW(KvCache(Shape(128), DType::q8, small));
  // A pool of another element type or shape is refused.
  EXPECT_THROW(KvCache(Shape(10), DType::bf16, small), std::invalid_argument);
  AttentionShape other = Shape(10);
  other.n_kv_heads = 1;
  other.n_heads = 2;
  EXPECT_THROW(KvCache(other, DType::q8, small), std::invalid_argument);
}

// Rows stored through a scattered block table read back bit for bit, through KeyAt and through
// the page table the kernels take (lsh::row_address over Rows()).
TEST(KvCache, ScatteredBlocksReadBackTheirRows) {
  for (DType t : {DType::f32, DType::bf16, DType::q8}) {
    const AttentionShape s = Shape(300);
    auto pool = std::make_shared<KvPool>(Shape(0), t, 0, 16);
    KvCache a(s, t, pool), b(s, t, pool), alone(s, t);
    const size_t w = s.n_kv_heads * s.head_dim, n = 300;
    const std::vector<float> k = Random(n * w, 3), v = Random(n * w, 4);
    // a and b grow by turns: their blocks interleave in the pool.
    for (size_t pos = 0; pos < n; pos += 10) {
      for (size_t l = 0; l < s.n_layers; ++l) {
        a.Append(l, pos, 10, &k[pos * w], &v[pos * w]);
        b.Append(l, pos, 10, &v[pos * w], &k[pos * w]);
        alone.Append(l, pos, 10, &k[pos * w], &v[pos * w]);
      }
    }
    EXPECT_NE(a.blocks()[1], a.blocks()[0] + 1) << "the test meant the blocks to interleave";
    for (size_t l = 0; l < s.n_layers; ++l)
      for (size_t h = 0; h < s.n_kv_heads; ++h) {
        const lsh::KvRows rows = a.Rows(l, h);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::memcmp(a.KeyAt(l, h, i), alone.KeyAt(l, h, i), a.RowBytes()), 0);
          ASSERT_EQ(std::memcmp(a.ValueAt(l, h, i), alone.ValueAt(l, h, i), a.RowBytes()), 0);
          ASSERT_EQ(lsh::row_address(rows.k, t, s.head_dim, rows.paged, i), a.KeyAt(l, h, i));
          ASSERT_EQ(lsh::row_address(rows.v, t, s.head_dim, rows.paged, i), a.ValueAt(l, h, i));
        }
      }
  }
}

struct MethodCase {
  const char *name;
  spec::Method method;
  DType dtype;
  const char *transform = "plain";
};

class ScatteredPool : public ::testing::TestWithParam<MethodCase> {};

// Every method, over a block table scattered in a pool shared with another sequence, gives the
// outputs it gives over a pool of its own, bit for bit: prefill, decode steps past the static
// window (the index built, then extended), and a LoadPrefix into a new cache.
TEST_P(ScatteredPool, EveryMethodReadsPagesBitForBit) {
  const MethodCase &mc = GetParam();
  AttentionSpec spec;
  spec.method = mc.method;
  spec.kv_dtype = mc.dtype;
  spec.K = 4;
  spec.L = 20;
  spec.sink = 4;
  spec.local = 16;
  spec.budget = 0.1;
  spec.quest_page = 8;
  spec.transform = ParseServedTransform(mc.transform);
  spec.dense_layers_set = true; // every layer sparse
  const AttentionShape s = Shape(400);
  auto pool = std::make_shared<KvPool>(Shape(0), mc.dtype, 0);
  auto alone = MakeAttention(spec, s);
  auto shared = MakeAttention(spec, s, pool);
  auto other = MakeAttention(spec, s, pool); // grows beside `shared`: its blocks interleave
  ThreadPool threads(2);
  const size_t d = s.head_dim, qw = s.n_heads * d, kw = s.n_kv_heads * d;
  std::vector<float> out_alone(130 * qw), out_shared(130 * qw), scratch(130 * qw);
  auto step = [&](size_t pos, size_t n, std::uint64_t seed) {
    for (size_t l = 0; l < s.n_layers; ++l) {
      const std::vector<float> q = Random(n * qw, seed + 10 * l, 0.0),
                               k = Random(n * kw, seed + 10 * l + 1, 1.5),
                               v = Random(n * kw, seed + 10 * l + 2);
      alone->Forward(l, pos, n, q.data(), k.data(), v.data(), out_alone.data(), threads);
      other->Forward(l, pos, n, q.data(), v.data(), k.data(), scratch.data(), threads);
      shared->Forward(l, pos, n, q.data(), k.data(), v.data(), out_shared.data(), threads);
      for (size_t i = 0; i < n * qw; ++i)
        ASSERT_EQ(std::memcmp(&out_alone[i], &out_shared[i], sizeof(float)), 0)
            << mc.name << " layer " << l << " position " << pos + i / qw << " element " << i % qw;
    }
  };
  // Prefill in chunks (each sequence takes a block at a time, by turns), then decode steps.
  size_t pos = 0;
  for (size_t chunk : {50u, 60u, 70u, 70u}) {
    step(pos, chunk, 1000 + pos);
    pos += chunk;
  }
  for (size_t i = 0; i < 12; ++i, ++pos)
    step(pos, 1, 5000 + pos);
  const std::vector<std::int32_t> &table = shared->cache().blocks();
  EXPECT_NE(table[1], table[0] + 1) << "the test meant the blocks to interleave";
  EXPECT_EQ(shared->stats().sampled, alone->stats().sampled) << mc.name;
  if (mc.method != spec::Method::dense) {
    EXPECT_GT(shared->stats().sampled, 0.0) << mc.name << ": no sparse step ran";
  }
  // A prefix loaded into a new cache of the shared pool decodes on like one loaded alone.
  auto loaded = MakeAttention(spec, s, pool), loaded_alone = MakeAttention(spec, s);
  loaded->LoadPrefix(shared->cache(), pos);
  loaded_alone->LoadPrefix(alone->cache(), pos);
  for (size_t l = 0; l < s.n_layers; ++l) {
    const std::vector<float> q = Random(qw, 9000 + l), k = Random(kw, 9100 + l, 1.5),
                             v = Random(kw, 9200 + l);
    loaded_alone->Forward(l, pos, 1, q.data(), k.data(), v.data(), out_alone.data(), threads);
    loaded->Forward(l, pos, 1, q.data(), k.data(), v.data(), out_shared.data(), threads);
    for (size_t i = 0; i < qw; ++i)
      ASSERT_EQ(std::memcmp(&out_alone[i], &out_shared[i], sizeof(float)), 0)
          << mc.name << " loaded, layer " << l << " element " << i;
  }
  // MemoryBytes counts the blocks held, ReservedBytes what the capacity may take.
  EXPECT_EQ(shared->cache().MemoryBytes(),
            KvPool::BlocksFor(pos) * KvPool::BlockBytesFor(s, mc.dtype));
  EXPECT_EQ(shared->cache().ReservedBytes(), KvCache::BytesFor(s, mc.dtype));
  EXPECT_EQ(ReservedBytesOf(spec, s), MakeAttention(spec, s)->ReservedBytes()) << mc.name;
}

INSTANTIATE_TEST_SUITE_P(
    Methods, ScatteredPool,
    ::testing::Values(MethodCase{"dense_bf16", spec::Method::dense, DType::bf16},
                      MethodCase{"dense_q8", spec::Method::dense, DType::q8},
                      MethodCase{"magicpig_bf16", spec::Method::magicpig, DType::bf16},
                      MethodCase{"magicpig_f32", spec::Method::magicpig, DType::f32},
                      MethodCase{"magicpig_q8", spec::Method::magicpig, DType::q8},
                      MethodCase{"magicpig_whiten_bf16", spec::Method::magicpig, DType::bf16,
                                 "whiten:a=0.15"},
                      MethodCase{"topk_bf16", spec::Method::topk, DType::bf16},
                      MethodCase{"topk_q8", spec::Method::topk, DType::q8},
                      MethodCase{"oracle_f32", spec::Method::oracle, DType::f32},
                      MethodCase{"quest_bf16", spec::Method::quest, DType::bf16},
                      MethodCase{"hybrid_bf16", spec::Method::lsh_hybrid, DType::bf16},
                      MethodCase{"hybrid_q8", spec::Method::lsh_hybrid, DType::q8},
                      MethodCase{"hybrid_f32", spec::Method::lsh_hybrid, DType::f32}),
    [](const ::testing::TestParamInfo<MethodCase> &i) { return std::string(i.param.name); });

} // namespace
} // namespace pig::runtime
