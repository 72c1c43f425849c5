// Rows in pages (lsh::PagedRows, a paged KV cache read in place through its page table) against
// the same rows back to back: key encoding, the index build and its growth, retrieval, the
// sampled step and the dense kernel give the same bits, for every kernel set on every target,
// f32 / bf16 / q8 rows, G = 1 and 3, a power-of-two page (16 rows: shift and mask) and another
// (24 rows: division). The cache has vLLM's CPU layout: one block holds every kv-head's page, K
// rows then V rows, so a kv-head's pages are page_stride bytes apart with the V rows at an offset;
// the page numbers are shuffled with gaps, and every byte the table does not reach is NaN (0xFF),
// so a row read from the wrong place shows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lsh_test_util.h"
#include "pig/reference/kv_quant.h"
#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_step.h"

namespace pig::test {
namespace {

using lsh::DType;
using lsh::KernelRegistry;
using lsh::LshKernelSet;
using lsh::PagedRows;

// n rows of one dtype back to back (the contiguous oracle's input).
std::vector<std::uint8_t> contiguous(const Rows &r, DType dt, std::size_t n, std::size_t d) {
  const std::size_t rb = spec::row_bytes(dt, d);
  std::vector<std::uint8_t> out(n * rb);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint8_t *dst = out.data() + i * rb;
    if (dt == DType::q8)
      ref::quantize_q8(r.f32.data.data() + i * d, d, dst);
    else
      std::memcpy(dst, static_cast<const std::uint8_t *>(r.data(dt)) + i * rb, rb);
  }
  return out;
}

// A block-paged cache of H kv-heads holding K and V of kv-head `head` (the others stay NaN):
// block b, kv-head h: K rows at ((b * H + h) * 2 * page_rows) * row_bytes, V rows page_rows rows
// later.
struct PagedCache {
  std::vector<std::uint8_t> bytes;
  std::vector<std::int32_t> pages;
  PagedRows paged;
  const void *k = nullptr, *v = nullptr;

  PagedCache(const std::vector<std::uint8_t> &K, const std::vector<std::uint8_t> &V, std::size_t n,
             std::size_t rb, std::size_t page_rows, std::size_t H, std::size_t head,
             std::uint64_t seed) {
    const std::size_t used = (n + page_rows - 1) / page_rows, blocks = 2 * used + 3;
    std::vector<std::int32_t> perm(blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
    pages.assign(perm.begin(), perm.begin() + std::ptrdiff_t(used));
    bytes.assign(blocks * H * 2 * page_rows * rb, 0xFF);
    const std::size_t stride = H * 2 * page_rows * rb;
    std::uint8_t *kb = bytes.data() + head * 2 * page_rows * rb, *vb = kb + page_rows * rb;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t off = std::size_t(pages[i / page_rows]) * stride + (i % page_rows) * rb;
      std::memcpy(kb + off, K.data() + i * rb, rb);
      std::memcpy(vb + off, V.data() + i * rb, rb);
    }
    paged = {pages.data(), page_rows, stride};
    k = kb;
    v = vb;
  }
};

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(PagedRows, RowAddressWalksThePageTable) {
  const std::int32_t pages[] = {5, 0, 2};
  const PagedRows p{pages, 4, 1000};
  const char *base = reinterpret_cast<const char *>(std::uintptr_t(1) << 20);
  for (std::size_t i = 0; i < 12; ++i) {
    const char *want = base + std::size_t(pages[i / 4]) * 1000 + (i % 4) * 64 * 2;
    EXPECT_EQ(lsh::row_address(base, DType::bf16, 64, p, i), want) << i;
  }
  EXPECT_EQ(lsh::row_address(base, DType::q8, 64, {}, 3),
            base + 3 * spec::row_bytes(DType::q8, 64));
}

TEST(PagedRows, KernelsReadPagesAsTheyReadContiguousRows) {
  const std::size_t d = 64, n0 = PIG_KERNELS_TEST_SMALL ? 500 : 1500, n1 = n0 + 300;
  const lsh::StaticTokens st{4, 64};
  const int t = 2;
  // The sanitizer build (-O1, instrumented): one group size and one configuration, same paths.
  const std::vector<int> groups =
      PIG_KERNELS_TEST_SMALL ? std::vector<int>{3} : std::vector<int>{1, 3};
  const std::vector<Config> configs = PIG_KERNELS_TEST_SMALL
                                          ? std::vector<Config>{{8, 75, 64}}
                                          : std::vector<Config>{{10, 150, 64}, {8, 75, 64}};
  for (int G : groups) {
    Problem pr = make_problem(n1, d, G, 41 + std::uint64_t(G));
    // Adversarial rows: a huge key and an all-zero one inside the indexed range.
    for (std::size_t j = 0; j < d; ++j) {
      pr.K.f32.at(100, j) = 3e4f * float(j % 3);
      pr.K.f32.at(101, j) = 0.f;
    }
    pr.K = Rows(std::move(pr.K.f32));
    for (DType dt : {DType::f32, DType::bf16, DType::q8}) {
      const std::size_t rb = spec::row_bytes(dt, d);
      const std::vector<std::uint8_t> K = contiguous(pr.K, dt, n1, d),
                                      V = contiguous(pr.V, dt, n1, d);
      for (std::size_t page_rows : {16, 24}) {
        const PagedCache cache(K, V, n1, rb, page_rows, 3, 1, 7 * page_rows + std::size_t(dt));
        for (const Config &c : configs) {
          const lsh::SimHash W(kSeed, d, c.K, c.L);
          const lsh::LogUTableData log_u(c.K, c.L, t);
          for_each_target([&](const char *) {
            for (const LshKernelSet &s : sets_for({c.K, c.L, int(d), dt, lsh::Target::cpu})) {
              const std::string what = KernelRegistry::describe(s) + " " + lsh::to_string(dt) +
                                       " G=" + std::to_string(G) +
                                       " page_rows=" + std::to_string(page_rows);
              // Key codes of rows [first, first + rows) (the encode kernel alone).
              {
                const std::size_t first = 37, rows = 301;
                std::vector<std::uint16_t> a(rows * std::size_t(c.L)), b(a.size(), 0xFFFF);
                lsh::EncodeArgs e;
                e.x = K.data();
                e.dtype = dt;
                e.rows = rows;
                e.first = first;
                e.W = W.view();
                e.codes = a.data();
                s.encode(e);
                e.x = cache.k;
                e.paged = cache.paged;
                e.codes = b.data();
                s.encode(e);
                ASSERT_EQ(a, b) << what;
              }
              // Build at n0, then grow to n1 in uneven steps: same codes, mean and retrieval.
              lsh::LshIndex ia = lsh::LshIndex::build(s, K.data(), dt, n0, W, st);
              lsh::LshIndex ib = lsh::LshIndex::build(s, cache.k, dt, cache.paged, n0, W, st);
              ASSERT_EQ(ia.codes(), ib.codes()) << what;
              ASSERT_EQ(ia.mean(), ib.mean()) << what;
              ia.reserve(n1);
              ib.reserve(n1);
              lsh::RetrievalScratch sa(n1), sb(n1);
              lsh::StepBuffers ba, bb;
              const std::size_t heads = std::size_t(G);
              std::vector<float> oa(heads * d), ob(oa.size()), la(heads), lb(heads);
              for (std::size_t n = n0; n <= n1; n += 97) {
                ia.extend(s, K.data(), dt, n, W);
                ib.extend(s, cache.k, dt, cache.paged, n, W);
                ASSERT_EQ(ia.count(), ib.count()) << what;
                ASSERT_EQ(ia.tail_count(), ib.tail_count()) << what;
                ASSERT_TRUE(std::equal(ia.tail_codes(),
                                       ia.tail_codes() + ia.tail_count() * std::size_t(c.L),
                                       ib.tail_codes()))
                    << what;
                lsh::StepStats ta, tb;
                lsh::sampled_step(s, ia, W, log_u, t, sa, ba,
                                  {pr.q.data(), G, 0.125f, oa.data(), la.data()},
                                  {K.data(), V.data(), dt, d, {}}, &ta);
                lsh::sampled_step(s, ib, W, log_u, t, sb, bb,
                                  {pr.q.data(), G, 0.125f, ob.data(), lb.data()},
                                  {cache.k, cache.v, dt, d, cache.paged}, &tb);
                ASSERT_EQ(ta.sampled_union, tb.sampled_union) << what << " n=" << n;
                ASSERT_TRUE(std::equal(ba.tokens.begin(),
                                       ba.tokens.begin() + std::ptrdiff_t(ta.sampled_union),
                                       bb.tokens.begin()))
                    << what << " n=" << n;
                ASSERT_TRUE(same_bits(oa, ob)) << what << " n=" << n;
                ASSERT_TRUE(same_bits(la, lb)) << what << " n=" << n;
                for (float x : oa)
                  ASSERT_FALSE(std::isnan(x)) << what << " n=" << n;
              }
              // The dense kernel over a range that starts and ends inside pages.
              for (auto [begin, end] : {std::pair<std::size_t, std::size_t>{0, n1},
                                        {5, 29},
                                        {page_rows - 1, n1 - 3},
                                        {n1 - 1, n1}}) {
                lsh::DenseAttentionArgs a;
                a.q = pr.q.data();
                a.G = G;
                a.d = d;
                a.scale = 0.125f;
                a.dtype = dt;
                a.begin = begin;
                a.end = end;
                a.k = K.data();
                a.v = V.data();
                a.out = oa.data();
                a.lse = la.data();
                s.dense_attention(a);
                a.k = cache.k;
                a.v = cache.v;
                a.paged = cache.paged;
                a.out = ob.data();
                a.lse = lb.data();
                s.dense_attention(a);
                ASSERT_TRUE(same_bits(oa, ob)) << what << " [" << begin << ", " << end << ")";
                ASSERT_TRUE(same_bits(la, lb)) << what << " [" << begin << ", " << end << ")";
                for (float x : oa)
                  ASSERT_FALSE(std::isnan(x)) << what;
              }
            }
          });
        }
      }
    }
  }
}

} // namespace
} // namespace pig::test
