// PagedLshAttention (decode over an engine's paged KV cache) against the Attention pig-run decodes
// with over its own cache: three requests decoded side by side in one paged cache (vLLM's CPU
// layout, shuffled block tables), one of them starting below the static window, give that path's
// output bit for bit at every layer and step, for every method (magicpig plain, fitted and per
// layer, dense, topk, oracle, quest, lsh-hybrid) over bf16 and f32 rows; then the state's life
// cycle and every refused input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/runtime/index_share.h"
#include "pig/runtime/lsh_attention.h"
#include "pig/runtime/paged_attention.h"

namespace {

using namespace pig::runtime;

constexpr size_t kLayers = 3, kHeads = 6, kKv = 2, kD = 64, kBs = 16, kCap = 1024;
constexpr size_t kBlocks = 3 * kCap / kBs + 5;

AttentionSpec Spec(pig::spec::Method m, const char *transform = "plain", bool per_layer = false) {
  AttentionSpec s;
  s.method = m;
  s.transform = pig::ref::TransformSpec::parse(transform);
  s.K = 8;
  s.L = 75;
  s.dense_layers = {1};
  s.dense_layers_set = true;
  if (per_layer) { // a tuned operating point: each sampled layer its own (K, L), not the spec's
    s.layers = {LayerLsh{{10, 150, 2}}, LayerLsh{{}, true}, LayerLsh{{8, 64, 1}}};
    s.dense_layers = {};
    s.dense_layers_set = false;
  }
  return s;
}

// One layer's cache: [block][kv-head][K rows, V rows][d], bf16 or f32.
struct Cache {
  lsh::DType dtype;
  size_t rb = lsh::row_bytes(dtype, kD);
  std::vector<std::uint8_t> data = std::vector<std::uint8_t>(kBlocks * kKv * 2 * kBs * rb, 0xFF);
  explicit Cache(lsh::DType dt = lsh::DType::bf16) : dtype(dt) {}
  void Row(const float *x, std::uint8_t *dst) const {
    if (dtype == lsh::DType::f32)
      std::memcpy(dst, x, kD * sizeof(float));
    else
      lsh::convert_to_bf16(x, reinterpret_cast<std::uint16_t *>(dst), kD);
  }
  void Put(const std::vector<std::int32_t> &table, size_t pos, const float *k, const float *v) {
    for (size_t h = 0; h < kKv; ++h) {
      const size_t row = ((size_t(table[pos / kBs]) * kKv + h) * 2 * kBs + pos % kBs) * rb;
      Row(k + h * kD, &data[row]);
      Row(v + h * kD, &data[row + kBs * rb]);
    }
  }
  PagedCache View() const { return {data.data(), dtype, kBlocks, kBs}; }
};

struct Seq {
  std::string id;
  size_t prompt;
  std::vector<std::int32_t> table;
  std::unique_ptr<Attention> contiguous;
};

void RunSideBySide(pig::spec::Method method, const char *transform = "plain",
                   bool per_layer = false, lsh::DType dtype = lsh::DType::bf16) {
  AttentionSpec spec = Spec(method, transform, per_layer);
  spec.kv_dtype = dtype;
  const AttentionShape shape{kLayers, kHeads, kKv, kD, kCap};
  PagedLshAttention paged(spec, shape, kBs);
  ThreadPool one(1), two(2);
  std::vector<std::int32_t> perm(kBlocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
  // "long" and "mid" are indexed at their first step; "short" (40 tokens) crosses sink + local +
  // kMinIndexed while decoding, so it is attended densely first and indexed later. Each call
  // hashes the joining keys and queries of all of them in one encode (4, 8 or 12 groups' rows,
  // split over 1 or 2 threads): every request must still get its own codes.
  constexpr size_t kTable = kCap / kBs;
  std::vector<Seq> seqs;
  seqs.push_back({"long", 300, {perm.begin(), perm.begin() + kTable}, nullptr});
  seqs.push_back({"short", 40, {perm.begin() + kTable, perm.begin() + 2 * kTable}, nullptr});
  seqs.push_back({"mid", 170, {perm.begin() + 2 * kTable, perm.begin() + 3 * kTable}, nullptr});
  std::vector<Cache> caches(kLayers, Cache(dtype));
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  std::vector<float> offset(kKv * kD);
  for (float &x : offset)
    x = 2.0f * nd(rng);
  auto fill = [&](std::vector<float> &x, bool keys) {
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = (keys ? offset[i % offset.size()] : 0.0f) + nd(rng);
  };
  for (Seq &s : seqs) {
    s.contiguous = MakeAttention(spec, shape);
    std::vector<float> q(s.prompt * kHeads * kD), k(s.prompt * kKv * kD), v(k.size()),
        out(q.size());
    for (size_t l = 0; l < kLayers; ++l) {
      fill(q, false);
      fill(k, true);
      fill(v, false);
      s.contiguous->Forward(l, 0, s.prompt, q.data(), k.data(), v.data(), out.data(), one);
      for (size_t p = 0; p < s.prompt; ++p)
        caches[l].Put(s.table, p, &k[p * kKv * kD], &v[p * kKv * kD]);
    }
  }
  const float scale = 1.0f / std::sqrt(float(kD));
  for (size_t step = 0; step < 80; ++step) {
    for (size_t l = 0; l < kLayers; ++l) {
      std::vector<std::vector<float>> q(seqs.size()), want(seqs.size()), got(seqs.size());
      std::vector<PagedRow> rows;
      for (size_t i = 0; i < seqs.size(); ++i) {
        Seq &s = seqs[i];
        const size_t pos = s.prompt + step;
        std::vector<float> k(kKv * kD), v(k.size());
        q[i].resize(kHeads * kD);
        fill(q[i], false);
        fill(k, true);
        fill(v, false);
        want[i].resize(q[i].size());
        got[i].assign(q[i].size(), -1.0f);
        s.contiguous->Forward(l, pos, 1, q[i].data(), k.data(), v.data(), want[i].data(), one);
        caches[l].Put(s.table, pos, k.data(), v.data());
        rows.push_back({s.id, s.table, pos + 1, q[i].data(), got[i].data()});
      }
      paged.Decode(l, caches[l].View(), rows, scale, step % 2 ? two : one);
      for (size_t i = 0; i < seqs.size(); ++i)
        ASSERT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)), 0)
            << seqs[i].id << " layer " << l << " step " << step;
    }
  }
  if (method == pig::spec::Method::magicpig) {
    // Indexes of the two sparse layers of both requests, and nothing else.
    size_t want_bytes = 0;
    for (const Seq &s : seqs)
      for (size_t l = 0; l < kLayers; ++l)
        for (size_t h = 0; h < kKv; ++h)
          if (const lsh::LshIndex *ix =
                  dynamic_cast<const LshAttention &>(*s.contiguous).index(l, h))
            want_bytes += ix->bytes() + (ix->fitted() ? ix->fitted()->bytes() : 0);
    EXPECT_GT(want_bytes, 0u);
    EXPECT_EQ(paged.IndexBytes(), want_bytes);
    const AttentionStats st = paged.stats();
    EXPECT_GT(st.cost2(), 0.0);
    EXPECT_LT(st.cost2(), 1.0);
  } else if (method == pig::spec::Method::dense) {
    EXPECT_EQ(paged.IndexBytes(), 0u);
  } else {
    EXPECT_EQ(paged.stats().decode_steps, 80u * seqs.size());
  }
  EXPECT_EQ(paged.Requests(), (std::vector<std::string>{"long", "mid", "short"}));
  paged.Free("long");
  paged.Free("never seen");
  EXPECT_EQ(paged.Requests(), (std::vector<std::string>{"mid", "short"}));
  paged.Free("mid");
  paged.Free("short");
  EXPECT_TRUE(paged.Requests().empty());
  EXPECT_EQ(paged.IndexBytes(), 0u);
}

TEST(PagedLshAttention, MagicPigEqualsContiguousDecoding) {
  RunSideBySide(pig::spec::Method::magicpig);
}
TEST(PagedLshAttention, FittedMagicPigEqualsContiguousDecoding) {
  RunSideBySide(pig::spec::Method::magicpig, "whiten:a=0.15");
}
TEST(PagedLshAttention, PerLayerMagicPigEqualsContiguousDecoding) {
  RunSideBySide(pig::spec::Method::magicpig, "plain", true);
}
TEST(PagedLshAttention, DenseEqualsContiguousDecoding) { RunSideBySide(pig::spec::Method::dense); }
TEST(PagedLshAttention, F32MagicPigEqualsContiguousDecoding) {
  RunSideBySide(pig::spec::Method::magicpig, "plain", false, lsh::DType::f32);
}
TEST(PagedLshAttention, TopKEqualsContiguousDecoding) { RunSideBySide(pig::spec::Method::topk); }
TEST(PagedLshAttention, OracleEqualsContiguousDecoding) {
  RunSideBySide(pig::spec::Method::oracle, "plain", false, lsh::DType::f32);
}
TEST(PagedLshAttention, QuestEqualsContiguousDecoding) { RunSideBySide(pig::spec::Method::quest); }
TEST(PagedLshAttention, LshHybridEqualsContiguousDecoding) {
  RunSideBySide(pig::spec::Method::lsh_hybrid);
}

// vLLM's prefix caching hands requests on one document the same blocks. With a fixed mean window
// (index_share.h) the requests over those blocks stand on one index over them, built by the
// first; each still gives what its own contiguous attention gives, bit for bit. A block the
// engine freed and filled with other keys (the same id, a new fingerprint) is not matched.
TEST(PagedLshAttention, RequestsOnTheSameBlocksShareTheirIndex) {
  AttentionSpec spec = Spec(pig::spec::Method::magicpig);
  spec.mean_window = 64;
  const AttentionShape shape{kLayers, kHeads, kKv, kD, kCap};
  PagedLshAttention paged(spec, shape, kBs);
  ThreadPool two(2);
  constexpr size_t kDoc = 256, kTable = kCap / kBs;
  std::vector<std::int32_t> doc_blocks(kDoc / kBs);
  std::iota(doc_blocks.begin(), doc_blocks.end(), 0);
  std::vector<Cache> caches(kLayers, Cache());
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  auto fill = [&](std::vector<float> &x, float offset) {
    for (float &v : x)
      v = offset + nd(rng);
  };
  // The document's keys and values per layer, shared by every request that starts with it.
  std::vector<std::vector<float>> dk(kLayers), dv(kLayers);
  auto new_document = [&] {
    for (size_t l = 0; l < kLayers; ++l) {
      dk[l].resize(kDoc * kKv * kD);
      dv[l].resize(dk[l].size());
      fill(dk[l], 1.5f);
      fill(dv[l], 0.0f);
    }
  };
  new_document();
  struct Req {
    std::string id;
    size_t own; // prompt positions after the document
    std::vector<std::int32_t> table;
    std::unique_ptr<Attention> contiguous;
    size_t pos = 0;
  };
  std::int32_t next = std::int32_t(doc_blocks.size());
  auto make = [&](std::string id, size_t own) {
    Req r{std::move(id), own, doc_blocks, MakeAttention(spec, shape)};
    while (r.table.size() < kTable)
      r.table.push_back(next++);
    for (size_t l = 0; l < kLayers; ++l) {
      std::vector<float> k(dk[l]), v(dv[l]), extra(own * kKv * kD), ev(extra.size());
      fill(extra, 1.5f);
      fill(ev, 0.0f);
      k.insert(k.end(), extra.begin(), extra.end());
      v.insert(v.end(), ev.begin(), ev.end());
      const size_t n = kDoc + own;
      std::vector<float> q(n * kHeads * kD), out(q.size());
      fill(q, 0.0f);
      r.contiguous->Forward(l, 0, n, q.data(), k.data(), v.data(), out.data(), two);
      for (size_t p = 0; p < n; ++p)
        caches[l].Put(r.table, p, &k[p * kKv * kD], &v[p * kKv * kD]);
    }
    r.pos = kDoc + own;
    return r;
  };
  auto decode = [&](std::vector<Req *> reqs, size_t steps) {
    const float scale = 1.0f / std::sqrt(float(kD));
    for (size_t step = 0; step < steps; ++step)
      for (size_t l = 0; l < kLayers; ++l) {
        std::vector<std::vector<float>> q(reqs.size()), want(reqs.size()), got(reqs.size());
        std::vector<PagedRow> rows;
        for (size_t i = 0; i < reqs.size(); ++i) {
          Req &r = *reqs[i];
          std::vector<float> k(kKv * kD), v(k.size());
          q[i].resize(kHeads * kD);
          fill(q[i], 0.0f);
          fill(k, 1.5f);
          fill(v, 0.0f);
          want[i].resize(q[i].size());
          got[i].assign(q[i].size(), -1.0f);
          r.contiguous->Forward(l, r.pos + step, 1, q[i].data(), k.data(), v.data(), want[i].data(),
                                two);
          caches[l].Put(r.table, r.pos + step, k.data(), v.data());
          rows.push_back({r.id, r.table, r.pos + step + 1, q[i].data(), got[i].data()});
        }
        paged.Decode(l, caches[l].View(), rows, scale, two);
        for (size_t i = 0; i < reqs.size(); ++i)
          ASSERT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)), 0)
              << reqs[i]->id << " layer " << l << " step " << step;
      }
    for (Req *r : reqs)
      r->pos += steps;
  };
  const size_t units = 2 * kKv; // two sampled layers
  Req a = make("a", 90);
  decode({&a}, 3); // a's first step builds the document's indexes and publishes them
  EXPECT_EQ(paged.SharedIndexStats().builds, units);
  Req b = make("b", 70), c = make("c", 100);
  decode({&b, &c, &a}, 4); // b and c stand on them
  IndexShare::Stats st = paged.SharedIndexStats();
  EXPECT_EQ(st.builds, units);
  EXPECT_EQ(st.hits, 2 * units);
  EXPECT_GT(st.bytes, 0u);
  // The engine frees the document's blocks and fills them with another text: a request over the
  // same block ids is not matched with the old indexes, and builds its own.
  paged.Free("a");
  paged.Free("b");
  paged.Free("c");
  new_document();
  Req d = make("d", 80);
  decode({&d}, 3);
  st = paged.SharedIndexStats();
  EXPECT_EQ(st.hits, 2 * units);
  EXPECT_EQ(st.builds, 2 * units);
}

TEST(PagedLshAttention, RefusesWhatItCannotServe) {
  const AttentionShape shape{kLayers, kHeads, kKv, kD, kCap};
  AttentionSpec q8 = Spec(pig::spec::Method::magicpig);
  q8.kv_dtype = lsh::DType::q8;
  EXPECT_THROW(PagedLshAttention(q8, shape, kBs), std::invalid_argument);
  EXPECT_THROW(PagedLshAttention(Spec(pig::spec::Method::magicpig), {kLayers, 7, 2, kD, kCap}, kBs),
               std::invalid_argument);
  // 0 query heads: divisible by any kv-head count, but a GQA group of 0 aborted in the kernels
  EXPECT_THROW(PagedLshAttention(Spec(pig::spec::Method::magicpig), {kLayers, 0, 2, kD, kCap}, kBs),
               std::invalid_argument);
  AttentionSpec no_dense = Spec(pig::spec::Method::magicpig);
  no_dense.dense_layers.clear();
  EXPECT_THROW(PagedLshAttention(no_dense, {0, kHeads, kKv, kD, kCap}, kBs), std::invalid_argument);
  EXPECT_THROW(
      PagedLshAttention(Spec(pig::spec::Method::magicpig), {kLayers, kHeads, kKv, 63, kCap}, kBs),
      std::invalid_argument);
  AttentionSpec bad_kl = Spec(pig::spec::Method::magicpig);
  bad_kl.K = 40;
  EXPECT_THROW(PagedLshAttention(bad_kl, shape, kBs), std::invalid_argument);

  PagedLshAttention paged(Spec(pig::spec::Method::magicpig), shape, kBs);
  ThreadPool pool(1);
  Cache cache;
  std::fill(cache.data.begin(), cache.data.end(),
            std::uint16_t(0x3f80)); // every row 1.0: keys equal
  std::vector<float> q(kHeads * kD, 0.5f), out(q.size());
  std::vector<std::int32_t> table(kCap / kBs);
  std::iota(table.begin(), table.end(), 0);
  auto decode = [&](std::vector<PagedRow> rows, PagedCache view) {
    paged.Decode(0, view, rows, 0.125f, pool);
  };
  const PagedCache ok = cache.View();
  EXPECT_NO_THROW(decode({{"a", table, 200, q.data(), out.data()}}, ok));
  // A table too short for the tokens, a block outside the cache, a sequence past the capacity.
  EXPECT_THROW(decode({{"b", {table.data(), 2}, 200, q.data(), out.data()}}, ok),
               std::invalid_argument);
  std::vector<std::int32_t> far = table;
  far[3] = std::int32_t(kBlocks);
  EXPECT_THROW(decode({{"b", far, 200, q.data(), out.data()}}, ok), std::invalid_argument);
  far[3] = -1;
  EXPECT_THROW(decode({{"b", far, 200, q.data(), out.data()}}, ok), std::invalid_argument);
  EXPECT_THROW(decode({{"b", table, kCap + 1, q.data(), out.data()}}, ok), std::invalid_argument);
  EXPECT_THROW(decode({{"b", table, 0, q.data(), out.data()}}, ok), std::invalid_argument);
  // One request twice in a call, a cache of another dtype or block size, a layer past the model.
  EXPECT_THROW(
      decode({{"a", table, 201, q.data(), out.data()}, {"a", table, 201, q.data(), out.data()}},
             ok),
      std::invalid_argument);
  EXPECT_THROW(
      decode({{"a", table, 201, q.data(), out.data()}}, {ok.data, lsh::DType::f32, kBlocks, kBs}),
      std::invalid_argument);
  EXPECT_THROW(
      decode({{"a", table, 201, q.data(), out.data()}}, {ok.data, lsh::DType::bf16, kBlocks, 32}),
      std::invalid_argument);
  EXPECT_THROW(paged.Decode(kLayers, ok, {}, 0.125f, pool), std::invalid_argument);
  // A scale other than the one the requests' attention was made with (the first call's).
  EXPECT_THROW(paged.Decode(0, ok, std::vector<PagedRow>{{"c", table, 200, q.data(), out.data()}},
                            0.2f, pool),
               std::invalid_argument);
  // The refusals left no state behind: only "a", from the first call.
  EXPECT_EQ(paged.Requests(), std::vector<std::string>{"a"});
  // The sequence went back (the engine recomputed it): rebuilt, not a throw.
  EXPECT_NO_THROW(decode({{"a", table, 150, q.data(), out.data()}}, ok));
  for (float x : out)
    EXPECT_FALSE(std::isnan(x));
}

} // namespace
