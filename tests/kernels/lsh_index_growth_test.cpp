// Incremental indexing (LshIndex::extend): tokens leaving the local window join the index through
// the unsorted tail, which is merged into the open segment's tables, including a merge that
// fills the 65,535-token segment and continues in a new one. After every growth step, retrieval
// (sorted part + tail) returns exactly pig::ref::sample_set on codes hashed against the build
// mean, for several queries and group sizes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pig/reference/lsh.h"
#include "pig/reference/magicpig.h"
#include "pig/reference/random.h"
#include "pig/reference/transform.h"
#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_step.h"
#include "test_util.h"

namespace {

using namespace pig::runtime::lsh;
namespace ref = pig::ref;

// n rows of d standard normal keys from rng plus `offset` (a common direction, as a model's keys
// have).
std::vector<float> ShiftedKeys(std::mt19937 &rng, std::size_t n, std::size_t d, float offset) {
  std::normal_distribution<float> nd;
  std::vector<float> keys(n * d);
  for (auto &x : keys)
    x = nd(rng) + offset;
  return keys;
}

TEST(LshIndexGrowth, RetrievalMatchesReferenceAcrossMergesAndSegments) {
  const std::size_t d = 8, sink = 4, local = 64;
  const int K = 4, L = 6, t = 2;
  const std::size_t n0 = 65200, n_end = 70000; // the first merge fills segment 0 and opens 1
  std::mt19937 rng(3);
  std::normal_distribution<float> nd; // the queries'
  const std::vector<float> keys = ShiftedKeys(rng, n_end, d, 0.5f);
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
    // Multi-probe radius 0, 1, 2 in turn: the sorted walk (both segments) and the tail count a
    // table when the codes differ in at most r bits, like ref::sample_set.
    const int r = int(n / 97 % 3);
    ref::LshConfig rcfg = cfg;
    rcfg.r = r;
    for (int G : {1, 3}) {
      for (auto &x : q)
        x = nd(rng);
      StepStats st;
      sampled_step(set, ix, W, log_u, {t, r}, scratch, buf,
                   {q.data(), G, 0.3f, out.data(), lse.data()},
                   {keys.data(), keys.data(), DType::f32, d, {}}, &st);
      std::vector<std::uint32_t> expect_union;
      for (int h = 0; h < G; ++h) {
        const auto qc = ref::encode({&q[std::size_t(h) * d], d}, Wr.view(), cfg);
        const auto s = ref::sample_set(qc, codes, rcfg, 0, ix.count());
        ASSERT_EQ(st.sampled_per_head[h], s.size()) << "n " << n << " head " << h << " r " << r;
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
// BuildOptions: codes hashed into a per-thread buffer and the tables reserved before they are
// written give the index a default build plus reserve() gives, and growth within the capacity
// never moves the tables (no step reallocates them).
TEST(LshIndexGrowth, BuildOptionsGiveTheSameIndexAllocatedOnce) {
  const std::size_t d = 16, n0 = 3000, n_end = 4200;
  std::mt19937 rng(5);
  const std::vector<float> keys = ShiftedKeys(rng, n_end, d, 0.25f);
  const LshKernelSet set = generic_kernel_set();
  const SimHash W(13, d, 6, 20);
  const StaticTokens st{4, 64};
  LshIndex a = LshIndex::build(set, keys.data(), DType::f32, n0, W, st);
  a.reserve(n_end);
  LshIndex b =
      LshIndex::build(set, keys.data(), DType::f32, n0, W, st, {}, BuildOptions{n_end, false});
  EXPECT_FALSE(a.codes().empty());
  EXPECT_TRUE(b.codes().empty());
  auto same = [](const LshIndex &x, const LshIndex &y) {
    const IndexView vx = x.view(), vy = y.view();
    const IndexLayout &l = x.layout();
    ASSERT_EQ(l.count, y.layout().count);
    ASSERT_EQ(x.tail_count(), y.tail_count());
    EXPECT_TRUE(std::equal(vx.offsets, vx.offsets + l.offset_entries, vy.offsets));
    EXPECT_TRUE(std::equal(vx.ids, vx.ids + l.id_entries, vy.ids));
    EXPECT_EQ(x.mean(), y.mean());
  };
  same(a, b);
  const std::uint16_t *ids = b.view().ids, *offsets = b.view().offsets;
  std::size_t merges = 0, sorted = b.layout().count;
  for (std::size_t n = n0 + 37; n <= n_end; n += 37) {
    a.extend(set, keys.data(), DType::f32, n, W);
    b.extend(set, keys.data(), DType::f32, n, W);
    same(a, b);
    EXPECT_EQ(b.view().ids, ids) << "the tables moved at n = " << n;
    EXPECT_EQ(b.view().offsets, offsets) << "the offsets moved at n = " << n;
    merges += b.layout().count != sorted;
    sorted = b.layout().count;
  }
  EXPECT_GE(merges, 2u); // the growth went through merges, which resize the tables
}

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

// Prefix sharing (LshIndex::freeze / on; index_share.h): an index that stands on another
// sequence's frozen index over shared positions, plus its own part, retrieves exactly what one
// index built over the whole sequence retrieves (tokens, head masks, per-head counts; the fused
// pass bit for bit), for bases cut at several points, while both grow; the mean of a window is
// pig::ref::build_index's.
TEST(LshIndexShare, AnIndexOnASharedBaseRetrievesWhatTheWholeIndexRetrieves) {
  const std::size_t d = 16, sink = 4, local = 16, window = 40;
  const int K = 5, L = 8, t = 2;
  const std::size_t n_end = 1400;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> keys(n_end * d), values(n_end * d);
  for (std::size_t i = 0; i < n_end; ++i)
    for (std::size_t j = 0; j < d; ++j) {
      // Runs of equal keys (every key of a run collides with the same queries) and an offset.
      keys[i * d + j] = i % 50 > 0 && i % 50 < 10 ? keys[(i - i % 50) * d + j] : nd(rng) + 0.7f;
      values[i * d + j] = nd(rng);
    }
  const LshKernelSet set = generic_kernel_set();
  const SimHash W(11, d, K, L);
  const StaticTokens st{sink, local, window};
  // The mean is the reference's over the window only.
  const ref::OwnedMatrix Km = [&] {
    ref::OwnedMatrix m(n_end, d);
    std::copy(keys.begin(), keys.end(), m.data.begin());
    return m;
  }();
  const ref::LshIndex rix =
      ref::build_index(Km.view(), ref::simhash_matrix(11, d, K, L).view(),
                       ref::LshConfig{K, L, t, 11}, ref::StaticConfig{sink, local, window});
  EXPECT_EQ(LshIndex::build(set, keys.data(), DType::f32, n_end, W, st).mean(), rix.mean);
  EXPECT_EQ(rix.mean, ref::mean_of_rows(Km.view(), sink, sink + window));

  // A window longer than the indexed range reaches into the local window: still the keys
  // [sink, sink + window), which every sequence holding those positions has.
  {
    const std::size_t short_n = sink + window + 5; // 29 indexed keys
    const ref::OwnedMatrix Ks = [&] {
      ref::OwnedMatrix m(short_n, d);
      std::copy(keys.begin(), keys.begin() + std::ptrdiff_t(short_n * d), m.data.begin());
      return m;
    }();
    const LshIndex ix = LshIndex::build(set, keys.data(), DType::f32, short_n, W, st);
    EXPECT_EQ(ix.mean_count(), window);
    EXPECT_EQ(ix.mean(), ref::mean_of_rows(Km.view(), sink, sink + window));
    EXPECT_EQ(ix.mean(),
              ref::build_index(Ks.view(), ref::simhash_matrix(11, d, K, L).view(),
                               ref::LshConfig{K, L, t, 11}, ref::StaticConfig{sink, local, window})
                  .mean);
  }
  const std::size_t base_n = 700; // the sequence that built the base had 700 positions
  const auto base = LshIndex::freeze(LshIndex::build(set, keys.data(), DType::f32, base_n, W, st));
  ASSERT_EQ(base->layout().count, base_n - sink - local);
  LogUTableData log_u(K, L, t);
  RetrievalScratch scratch(n_end);
  StepBuffers bw, bs;
  std::vector<float> q(3 * d), ow(3 * d), os(3 * d), lw(3), ls(3);
  for (std::size_t limit : {window, std::size_t(333), base->layout().count}) {
    for (std::size_t n0 : {sink + limit + local, std::size_t(900)}) {
      LshIndex whole = LshIndex::build(set, keys.data(), DType::f32, n0, W, st);
      LshIndex shared = LshIndex::on(base, limit);
      shared.extend(set, keys.data(), DType::f32, n0, W);
      ASSERT_EQ(shared.count(), whole.count());
      ASSERT_EQ(shared.mean(), whole.mean());
      ASSERT_EQ(shared.base_count(), limit);
      for (std::size_t n = n0; n <= n_end; n += 131) {
        whole.extend(set, keys.data(), DType::f32, n, W);
        shared.extend(set, keys.data(), DType::f32, n, W);
        for (int G : {1, 3}) {
          for (auto &x : q)
            x = nd(rng) + 0.7f;
          const KvRows rows{keys.data(), values.data(), DType::f32, d, {}};
          StepStats sw, ss;
          sampled_step(set, whole, W, log_u, t, scratch, bw,
                       {q.data(), G, 0.3f, ow.data(), lw.data()}, rows, &sw);
          sampled_step(set, shared, W, log_u, t, scratch, bs,
                       {q.data(), G, 0.3f, os.data(), ls.data()}, rows, &ss);
          const std::string at = "limit " + std::to_string(limit) + " n " + std::to_string(n) +
                                 " G " + std::to_string(G);
          ASSERT_EQ(ss.sampled_union, sw.sampled_union) << at;
          ASSERT_GT(sw.sampled_union, 0u) << at;
          for (int h = 0; h < G; ++h)
            ASSERT_EQ(ss.sampled_per_head[h], sw.sampled_per_head[h]) << at;
          ASSERT_TRUE(std::equal(bw.tokens.begin(),
                                 bw.tokens.begin() + std::ptrdiff_t(sw.sampled_union),
                                 bs.tokens.begin()))
              << at;
          if (G > 1) {
            ASSERT_TRUE(std::equal(bw.masks.begin(),
                                   bw.masks.begin() + std::ptrdiff_t(sw.sampled_union),
                                   bs.masks.begin()))
                << at;
          }
          ASSERT_EQ(std::memcmp(ow.data(), os.data(), std::size_t(G) * d * sizeof(float)), 0) << at;
          ASSERT_EQ(std::memcmp(lw.data(), ls.data(), std::size_t(G) * sizeof(float)), 0) << at;
        }
      }
      EXPECT_LT(shared.bytes(), whole.bytes()); // the base's tables are not its own
    }
  }
  // What cannot be shared, or stood on.
  EXPECT_THROW(LshIndex::on(base, base->layout().count + 1), std::invalid_argument);
  EXPECT_THROW(LshIndex::on(base, 0), std::invalid_argument);
  EXPECT_THROW(LshIndex::on(nullptr, window), std::invalid_argument);
  LshIndex grown = LshIndex::build(set, keys.data(), DType::f32, 400, W, st);
  grown.extend(set, keys.data(), DType::f32, 410, W); // a tail not merged yet
  EXPECT_THROW(LshIndex::freeze(std::move(grown)), std::invalid_argument);
  EXPECT_THROW(LshIndex::freeze(LshIndex::build(set, keys.data(), DType::f32, 400, W, st,
                                                ref::TransformSpec::parse("whiten:a=0.25"))),
               std::invalid_argument);
  EXPECT_THROW(LshIndex::freeze(LshIndex::on(base, window)), std::invalid_argument);
}
