// Incremental indexing (LshIndex::extend): tokens leaving the local window join the index through
// the unsorted tail, which is merged into the open segment's tables, including a merge that
// fills the 65,535-token segment and continues in a new one. After every growth step, retrieval
// (sorted part + tail) returns exactly pig::ref::sample_set on codes hashed against the build
// mean, for several queries and group sizes.
#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "pig/reference/lsh.h"
#include "pig/reference/random.h"
#include "pig/reference/transform.h"
#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_step.h"
#include "test_util.h"

namespace {

using namespace pig::runtime::lsh;
namespace ref = pig::ref;

TEST(LshIndexGrowth, RetrievalMatchesReferenceAcrossMergesAndSegments) {
  const std::size_t d = 8, sink = 4, local = 64;
  const int K = 4, L = 6, t = 2;
  const std::size_t n0 = 65200, n_end = 70000; // the first merge fills segment 0 and opens 1
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> keys(n_end * d);
  for (auto &x : keys)
    x = nd(rng) + 0.5f;
  const LshKernelSet set = generic_kernel_set();
  const SimHash W(11, d, K, L);
  LshIndex ix = LshIndex::build(set, keys.data(), DType::f32, n0, W, StaticTokens{sink, local});
  ix.drop_codes();
  ix.reserve(n_end);
  const ref::OwnedMatrix Wr = ref::simhash_matrix(11, d, K, L);
  const ref::LshConfig cfg{K, L, t, 11};
  // Reference codes of every token that will ever be indexed, against the build mean.
  std::vector<std::uint16_t> codes;
  for (std::size_t i = sink; i < n_end - local; ++i) {
    std::vector<float> c(d);
    for (std::size_t j = 0; j < d; ++j)
      c[j] = keys[i * d + j] - ix.mean()[j];
    const auto cc = ref::encode(c, Wr.view(), cfg);
    codes.insert(codes.end(), cc.begin(), cc.end());
  }
  RetrievalScratch scratch(n_end);
  StepBuffers buf;
  LogUTableData log_u(K, L, t);
  std::vector<float> q(3 * d), out(3 * d), lse(3);
  std::size_t merges = 0, last_sorted = ix.layout().count;
  for (std::size_t n = n0; n <= n_end; n += 97) {
    ix.extend(set, keys.data(), DType::f32, n, W);
    ASSERT_EQ(ix.count(), n - sink - local);
    ASSERT_LT(ix.tail_count(), ix.tail_limit());
    merges += ix.layout().count != last_sorted;
    last_sorted = ix.layout().count;
    for (int G : {1, 3}) {
      for (auto &x : q)
        x = nd(rng);
      StepStats st;
      sampled_step(set, ix, W, log_u, t, scratch, buf, {q.data(), G, 0.3f, out.data(), lse.data()},
                   {keys.data(), keys.data(), DType::f32, d, {}}, &st);
      std::vector<std::uint32_t> expect_union;
      for (int h = 0; h < G; ++h) {
        const auto qc = ref::encode({&q[std::size_t(h) * d], d}, Wr.view(), cfg);
        const auto s = ref::sample_set(qc, codes, cfg, 0, ix.count());
        ASSERT_EQ(st.sampled_per_head[h], s.size()) << "n " << n << " head " << h;
        for (std::size_t i : s)
          expect_union.push_back(std::uint32_t(sink + i));
      }
      std::sort(expect_union.begin(), expect_union.end());
      expect_union.erase(std::unique(expect_union.begin(), expect_union.end()), expect_union.end());
      ASSERT_EQ(st.sampled_union, expect_union.size()) << "n " << n;
      ASSERT_TRUE(std::equal(expect_union.begin(), expect_union.end(), buf.tokens.begin()))
          << "n " << n;
    }
  }
  EXPECT_GE(merges, 2u);
  EXPECT_EQ(ix.layout().segments, 2u);
  EXPECT_THROW(ix.extend(set, keys.data(), DType::f32, n0, W), std::invalid_argument);
}

// Fitted hashing as the index grows: the transform fitted at build is kept (like the mean);
// every token that joins later is mapped by the same maps and gets its |k'|. Retrieval returns
// pig::ref::sample_set on the reference's codes of every indexed token (keys mapped by
// HashTransform::key, queries by HashTransform::query), across tail merges.
TEST(LshIndexGrowth, FittedHashingKeepsItsTransformAsTheIndexGrows) {
  const std::size_t d = 16, sink = 4, local = 64;
  const int K = 6, L = 10, t = 2;
  const std::size_t n0 = 1500, n_end = 3200;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> keys(n_end * d);
  for (std::size_t i = 0; i < n_end; ++i)
    for (std::size_t j = 0; j < d; ++j) // anisotropic: sd 4, 2.8, 2, ... plus an offset
      keys[i * d + j] = float(4.0 * std::pow(0.7, double(j))) * nd(rng) + 0.5f;
  const LshKernelSet set = generic_kernel_set();
  const SimHash W(11, d, K, L);
  const ref::TransformSpec spec = ref::TransformSpec::parse("whiten:a=0.25");
  LshIndex ix =
      LshIndex::build(set, keys.data(), DType::f32, n0, W, StaticTokens{sink, local}, spec);
  ix.drop_codes();
  ix.reserve(n_end);
  ASSERT_NE(ix.fitted(), nullptr);
  const ref::HashTransform &T = ix.fitted()->transform();
  const ref::OwnedMatrix Wr = ref::simhash_matrix(11, d, K, L);
  const ref::LshConfig cfg{K, L, t, 11};
  std::vector<std::uint16_t> codes;
  std::vector<double> norms;
  for (std::size_t i = sink; i < n_end - local; ++i) {
    std::vector<float> c(d);
    for (std::size_t j = 0; j < d; ++j)
      c[j] = keys[i * d + j] - ix.mean()[j];
    const auto cc = ref::encode(T.key(c), Wr.view(), cfg);
    codes.insert(codes.end(), cc.begin(), cc.end());
    double n2 = 0;
    for (float x : T.key(c))
      n2 += double(x) * double(x);
    norms.push_back(std::sqrt(n2));
  }
  RetrievalScratch scratch(n_end);
  StepBuffers buf;
  LogUTableData log_u(K, L, t);
  std::vector<float> q(3 * d), out(3 * d), lse(3);
  std::size_t merges = 0, last_sorted = ix.layout().count;
  for (std::size_t n = n0; n <= n_end; n += 61) {
    ix.extend(set, keys.data(), DType::f32, n, W);
    ASSERT_EQ(&ix.fitted()->transform(), &T); // kept, not refitted
    ASSERT_EQ(ix.fitted()->norm_count(), ix.count());
    merges += ix.layout().count != last_sorted;
    last_sorted = ix.layout().count;
    for (std::size_t i = 0; i < ix.count(); i += 37)
      ASSERT_NEAR(ix.fitted()->key_norms()[i], norms[i], 1e-5 * norms[i]) << "token " << i;
    for (auto &x : q)
      x = nd(rng);
    StepStats st;
    sampled_step(set, ix, W, log_u, t, scratch, buf, {q.data(), 3, 0.3f, out.data(), lse.data()},
                 {keys.data(), keys.data(), DType::f32, d, {}}, &st);
    for (int h = 0; h < 3; ++h) {
      const auto qc = ref::encode(T.query({&q[std::size_t(h) * d], d}), Wr.view(), cfg);
      const auto s = ref::sample_set(qc, codes, cfg, 0, ix.count());
      ASSERT_EQ(st.sampled_per_head[h], s.size()) << "n " << n << " head " << h;
    }
  }
  EXPECT_GE(merges, 2u);
}

// The retrieval counters are epoch-stamped u8: each head advances the epoch by t + 1 (its counts
// saturate there) and the counters are cleared only when the 8-bit epoch space runs out (every
// ~255 / (t + 1) heads). Thousands of heads with varying t, group size and query, on random keys
// and on all-equal keys (every token collides in every table: every count saturates), alternating
// between a large and a small index that share one scratch (as the kv-heads of a thread do), must
// keep returning pig::ref::sample_set exactly across many wraps.
TEST(LshIndexGrowth, RetrievalSurvivesEpochWraparound) {
  const std::size_t d = 8, n = 3000;
  const int K = 5, L = 40; // 18 to 127 heads per epoch wrap
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const SimHash W(17, d, K, L);
  const ref::OwnedMatrix Wr = ref::simhash_matrix(17, d, K, L);
  // Every target: the walk, the epoch wraps and the union (with its words of 64 tokens when all
  // keys are equal) differ between AVX3_DL, AVX3 and the scalar code.
  pig::test::for_each_target([&](const char *) {
    const LshKernelSet set = generic_kernel_set();
    for (bool all_equal : {false, true}) {
      std::vector<float> keys(n * d);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < d; ++j)
          keys[i * d + j] = all_equal && i > 0 ? keys[j] : nd(rng);
      const LshIndex big = LshIndex::build(set, keys.data(), DType::f32, n, W, StaticTokens{0, 0});
      const LshIndex small =
          LshIndex::build(set, keys.data(), DType::f32, n / 3, W, StaticTokens{0, 0});
      RetrievalScratch scratch(n);
      std::vector<std::uint16_t> qc(std::size_t(4) * std::size_t(L));
      std::vector<std::uint32_t> tokens(n);
      std::vector<std::uint8_t> masks(n);
      std::size_t heads = 0;
      for (int call = 0; heads < 4000; ++call) {
        const int G = 1 + call % 4, t = 1 + (call / 4) % 5 * 3; // t in {1, 4, 7, 10, 13}
        // Every wrap happens on the small index, so the large one next reads counters past the
        // small one's count that only a clear of the whole scratch resets.
        const bool wraps = *scratch.state().epoch + std::uint32_t(G * (t + 1)) > 0xFFu;
        const LshIndex &ix = wraps || call % 3 == 2 ? small : big;
        const std::vector<std::uint16_t> &codes = ix.codes();
        const std::size_t count = ix.count();
        std::vector<float> q(std::size_t(G) * d);
        for (auto &x : q)
          x = nd(rng);
        EncodeArgs ea;
        ea.x = q.data();
        ea.dtype = DType::f32;
        ea.rows = std::size_t(G);
        ea.W = W.view();
        ea.codes = qc.data();
        set.encode(ea);
        std::size_t got = 0, per_head[kMaxGroup] = {};
        RetrieveArgs ra;
        ra.index = ix.view();
        ra.query_codes = qc.data();
        ra.G = G;
        ra.t = t;
        ra.state = scratch.state();
        ra.tokens = tokens.data();
        ra.masks = masks.data();
        ra.count = &got;
        ra.per_head = per_head;
        set.retrieve(ra);
        heads += std::size_t(G);
        const ref::LshConfig cfg{K, L, t, 17};
        std::vector<std::uint8_t> expect_mask(count, 0);
        for (int h = 0; h < G; ++h) {
          const auto s = ref::sample_set({&qc[std::size_t(h) * std::size_t(L)], std::size_t(L)},
                                         codes, cfg, 0, count);
          ASSERT_EQ(per_head[h], s.size()) << "call " << call << " head " << h;
          for (std::size_t i : s)
            expect_mask[i] |= std::uint8_t(1u << h);
        }
        std::size_t k = 0;
        for (std::size_t i = 0; i < count; ++i) {
          if (!expect_mask[i])
            continue;
          ASSERT_LT(k, got) << "call " << call;
          ASSERT_EQ(tokens[k], i) << "call " << call;
          ASSERT_EQ(masks[k], expect_mask[i]) << "call " << call << " token " << i;
          ++k;
        }
        ASSERT_EQ(k, got) << "call " << call << (all_equal ? " (all keys equal)" : "");
      }
    }
  });
}

} // namespace
