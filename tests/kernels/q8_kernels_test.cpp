// The LSH kernels on q8 rows (8-bit, a bf16 scale per 32 elements: pig/reference/kv_quant.h)
// against pig::ref on the dequantised rows, for the generic sets (every schedule) and the
// specialised q8 set (specialisations.cpp), on every compiled target. A q8 element is q * s,
// exact in f32, so a kernel that reads q8 rows sees the very numbers the reference sees in the
// dequantised f32 rows: the tolerances are those of the f32 and bf16 tests
// (lsh_attend_test.cpp), which differ from the reference only by f32 accumulation, and codes,
// means, sample sets and counts must be equal.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pig/reference/attention.h"
#include "pig/reference/kv_quant.h"
#include "pig/reference/lsh.h"
#include "pig/reference/magicpig.h"
#include "pig/reference/random.h"
#include "pig/reference/synthetic.h"
#include "pig/reference/transform.h"
#include "schedules.h"
#include "test_util.h"

namespace pig::test {
namespace {

using lsh::DType;
using lsh::KernelKey;
using lsh::KernelRegistry;
using lsh::LshKernelSet;

constexpr std::uint64_t kSeed = 4321;
constexpr std::size_t kN = PIG_KERNELS_TEST_SMALL ? 600 : 2000;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Rows quantised to q8, and the dequantised f32 rows the reference reads.
struct Q8Rows {
  ref::OwnedMatrix f32; // n x d, dequantised
  std::vector<std::uint8_t> q8;

  explicit Q8Rows(const ref::OwnedMatrix &src)
      : f32(src.rows, src.cols), q8(src.rows * ref::q8_row_bytes(src.cols)) {
    const std::size_t rb = ref::q8_row_bytes(src.cols);
    for (std::size_t i = 0; i < src.rows; ++i) {
      ref::quantize_q8(src.row(i), src.cols, q8.data() + i * rb);
      ref::dequantize_q8(q8.data() + i * rb, src.cols, f32.row(i));
    }
  }
  const void *data() const { return q8.data(); }
};

KernelKey q8_key(int K, int L, int d) { return {K, L, d, DType::q8, lsh::Target::cpu}; }

TEST(Q8Registry, ResolvesAndRejectsHeadDims) {
  // specialisations.cpp registers K=10 L=150 d=64 q8 (configs/kernels.txt's line); the sanitizer
  // build links only the contract example (tests/kernels/CMakeLists.txt).
  const KernelKey spec = q8_key(10, 150, 64);
  if (!PIG_KERNELS_TEST_SMALL) {
    ASSERT_TRUE(KernelRegistry::global().has_specialised(spec));
    const LshKernelSet s = KernelRegistry::global().resolve(spec);
    EXPECT_TRUE(s.specialised);
    EXPECT_EQ(s.key, spec);
    EXPECT_NE(KernelRegistry::describe(s).find("specialised K=10 L=150 d=64 q8 cpu"),
              std::string::npos)
        << KernelRegistry::describe(s);
  }
  for (int d : {32, 96, 128}) {
    const LshKernelSet g = KernelRegistry::global().resolve(q8_key(8, 75, d));
    EXPECT_FALSE(g.specialised);
    EXPECT_EQ(g.key.dtype, DType::q8);
  }
  // Not a multiple of 32: refused with the reason (bf16 and f32 serve these dims).
  for (int d : {80, 48, 16, 66}) {
    try {
      (void)KernelRegistry::global().resolve(q8_key(10, 150, d));
      ADD_FAILURE() << "q8 d=" << d << " accepted";
    } catch (const std::invalid_argument &e) {
      EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(
        (void)KernelRegistry::global().resolve({10, 150, d, DType::bf16, lsh::Target::cpu}));
  }
  EXPECT_EQ(lsh::row_bytes(DType::q8, 64), 68u);
  EXPECT_EQ(lsh::row_bytes(DType::q8, 128), 136u);
  DType t = DType::f32;
  EXPECT_TRUE(lsh::parse_dtype("q8", t));
  EXPECT_EQ(t, DType::q8);
  EXPECT_STREQ(lsh::to_string(DType::q8), "q8");
  EXPECT_FALSE(lsh::parse_dtype("q4", t));
  EXPECT_FALSE(lsh::parse_dtype("Q8", t));
  EXPECT_EQ(t, DType::q8);
  EXPECT_EQ(lsh::dtype_unsupported(DType::q8, 64), "");
  EXPECT_NE(lsh::dtype_unsupported(DType::q8, 80).find("80"), std::string::npos);
  EXPECT_EQ(lsh::dtype_unsupported(DType::bf16, 80), "");
}

// Rows that stress q8: an outlier channel (every row's block 1 gets a large scale), all rows
// equal, huge and tiny scales, a row of zeros, a row with one huge element, a row of mixed
// magnitudes per block, and (optionally) NaN and infinity in a block.
ref::OwnedMatrix adversarial_rows(std::size_t n, std::size_t d, std::uint64_t seed,
                                  bool non_finite) {
  ref::OwnedMatrix m = gaussian(n, d, seed);
  for (std::size_t i = 0; i < n; ++i)
    m.at(i, 37) = 40.0f + 10.0f * m.at(i, 37); // outlier channel
  for (std::size_t j = 0; j < d; ++j) {
    m.at(0, j) = 0.0f;
    m.at(1, j) *= 1e-30f;
    m.at(2, j) *= 1e30f;
    m.at(3, j) = m.at(4, j);
    m.at(5, j) = 0.25f; // all equal entries
    m.at(6, j) *= j < 32 ? 1e-20f : 1e20f;
    m.at(7, j) *= 1e-41f; // subnormal entries and scale
  }
  m.at(8, 3) = 1e4f;
  if (non_finite) {
    m.at(9, 3) = kNaN;
    m.at(10, d - 1) = std::numeric_limits<float>::infinity();
  }
  return m;
}

TEST(Q8Encode, CodesEqualReferenceOnDequantisedRows) {
  for_each_target([](const char *) {
    for (int d : {64, 128})
      for (auto [K, L] : {std::pair{10, 150}, std::pair{8, 75}}) {
        const lsh::SimHash W(kSeed, std::size_t(d), K, L);
        const ref::OwnedMatrix Wr = ref::simhash_matrix(kSeed, std::size_t(d), K, L);
        const ref::LshConfig cfg{K, L, 2, kSeed};
        const Q8Rows x(adversarial_rows(40, std::size_t(d), 70 + std::uint64_t(d), true));
        // Without a mean (queries), and with one (keys, centered by the index's mean).
        std::vector<float> mean(static_cast<std::size_t>(d));
        for (std::size_t j = 0; j < mean.size(); ++j)
          mean[j] = float(0.3 * double(j % 7) - 0.8);
        for (bool centered : {false, true}) {
          std::vector<std::uint16_t> want;
          for (std::size_t i = 0; i < x.f32.rows; ++i) {
            std::vector<float> c(x.f32.row(i), x.f32.row(i) + d);
            if (centered)
              for (std::size_t j = 0; j < c.size(); ++j)
                c[j] = c[j] - mean[j];
            const auto cc = ref::encode(c, Wr.view(), cfg);
            want.insert(want.end(), cc.begin(), cc.end());
          }
          for (const LshKernelSet &s : sets_for(q8_key(K, L, d))) {
            const std::string what = KernelRegistry::describe(s) + (centered ? " centered" : "");
            std::vector<std::uint16_t> got(want.size(), 0xFFFF);
            lsh::EncodeArgs a;
            a.x = x.data();
            a.dtype = DType::q8;
            a.rows = x.f32.rows;
            a.mean = centered ? mean.data() : nullptr;
            a.W = W.view();
            a.codes = got.data();
            s.encode(a);
            ASSERT_EQ(got, want) << what;
            // Partial blocks of rows: the codes of the rows asked for, nothing past them.
            for (std::size_t rows : {1, 3, 7, 9, 13}) {
              std::fill(got.begin(), got.end(), 0xFFFF);
              a.rows = rows;
              s.encode(a);
              const std::size_t Ls = std::size_t(L);
              ASSERT_TRUE(std::equal(want.begin(), want.begin() + rows * Ls, got.begin()))
                  << what << " rows " << rows;
              ASSERT_TRUE(std::all_of(got.begin() + rows * Ls, got.end(),
                                      [](std::uint16_t v) { return v == 0xFFFF; }))
                  << what << " codes written past row " << rows;
            }
          }
        }
      }
  });
}

struct Problem {
  Q8Rows K, V;
  std::vector<float> q; // G * d
  std::size_t n, d;
};

Problem make_problem(std::size_t n, std::size_t d, int G, std::uint64_t seed,
                     double key_scale = 1.0, double value_scale = 1.0) {
  ref::SyntheticConfig sc;
  sc.n = n;
  sc.d = d;
  sc.seed = seed;
  ref::AttentionProblem p = ref::synthetic_problem(sc);
  for (float &x : p.K.data)
    x = float(double(x) * key_scale);
  for (float &x : p.V.data)
    x = float(double(x) * value_scale);
  Problem pr{Q8Rows(p.K), Q8Rows(p.V), {}, n, d};
  ref::Rng rng(seed + 99);
  for (int h = 0; h < G; ++h)
    for (std::size_t j = 0; j < d; ++j)
      pr.q.push_back(p.q[j] + float(h == 0 ? 0.0 : 0.5 * rng.gaussian()));
  return pr;
}

TEST(Q8DenseAttention, MatchesReferenceOnDequantisedRows) {
  for_each_target([](const char *) {
    for (std::size_t d : {std::size_t(64), std::size_t(128), std::size_t(96)})
      for (std::size_t n : {0, 1, 15, 16, 17, 63, 64, 65, 129, 300}) // vector and block edges
        for (int G : {1, 3, 4, 8}) {
          const Problem pr = make_problem(std::max<std::size_t>(n, 1), d, G, 40 + n);
          const float scale = float(1.0 / std::sqrt(double(d)));
          std::vector<ref::Attention> want;
          for (int h = 0; h < G; ++h) {
            const std::span<const float> qh(pr.q.data() + std::size_t(h) * d, d);
            const ref::Matrix Kn{pr.K.f32.data.data(), n, d}, Vn{pr.V.f32.data.data(), n, d};
            want.push_back(ref::dense_attention(qh, Kn, Vn, double(scale)));
          }
          for (const LshKernelSet &s : sets_for(q8_key(10, 150, int(d)))) {
            std::vector<float> out(std::size_t(G) * d), lse(static_cast<std::size_t>(G));
            lsh::DenseAttentionArgs a;
            a.q = pr.q.data();
            a.G = G;
            a.d = d;
            a.scale = scale;
            a.k = pr.K.data();
            a.v = pr.V.data();
            a.dtype = DType::q8;
            a.begin = 0;
            a.end = n;
            a.out = out.data();
            a.lse = lse.data();
            s.dense_attention(a);
            for (int h = 0; h < G; ++h)
              expect_attention_near(out.data() + std::size_t(h) * d, lse[std::size_t(h)],
                                    want[std::size_t(h)], 1e-5,
                                    KernelRegistry::describe(s) + " d=" + std::to_string(d) +
                                        " n=" + std::to_string(n) + " G=" + std::to_string(G));
          }
        }
  });
}

// One set's dense pass over rows [b, e) of q8 keys and values for the 3 query heads of q:
// each head's output (d floats) and lse.
void dense_q8(const LshKernelSet &s, const std::vector<float> &q, std::size_t d, float scale,
              const Q8Rows &K, const Q8Rows &V, std::size_t b, std::size_t e,
              std::vector<float> &out, std::vector<float> &lse) {
  out.assign(3 * d, 0.0f);
  lse.assign(3, 0.0f);
  lsh::DenseAttentionArgs a;
  a.q = q.data();
  a.G = 3;
  a.d = d;
  a.scale = scale;
  a.k = K.data();
  a.v = V.data();
  a.dtype = DType::q8;
  a.begin = b;
  a.end = e;
  a.out = out.data();
  a.lse = lse.data();
  s.dense_attention(a);
}

// A range that starts inside the rows (begin > 0), over adversarial keys and values (outlier
// channel, zeros, huge and tiny blocks): the row addressing of q8 rows past the first.
TEST(Q8DenseAttention, RangesAndAdversarialRows) {
  for_each_target([](const char *) {
    for (std::size_t d : {std::size_t(64), std::size_t(128)}) {
      const std::size_t n = 40;
      // Keys without the 1e30 row (its logits would be infinite in f32 and double alike) but
      // with every other adversarial row; values with all of them.
      ref::OwnedMatrix k = adversarial_rows(n, d, 80 + d, false);
      for (std::size_t j = 0; j < d; ++j)
        k.at(2, j) = k.at(11, j);
      for (std::size_t j = 32; j < d; ++j)
        k.at(6, j) *= 1e-18f; // 1e2 scale: large logits, not infinite
      const Q8Rows K(k), V(adversarial_rows(n, d, 90 + d, false));
      const std::vector<float> q = gaussian(1, 3 * d, 91).data;
      const float scale = float(1.0 / std::sqrt(double(d)));
      for (auto [b, e] : {std::pair<std::size_t, std::size_t>{0, 40}, {3, 40}, {17, 33}, {9, 10}})
        for (const LshKernelSet &s : sets_for(q8_key(10, 150, int(d)))) {
          std::vector<float> out, lse;
          dense_q8(s, q, d, scale, K, V, b, e, out, lse);
          for (std::size_t h = 0; h < 3; ++h) {
            std::vector<std::size_t> ids;
            for (std::size_t i = b; i < e; ++i)
              ids.push_back(i);
            const ref::Attention want =
                ref::attention_over({q.data() + h * d, d}, K.f32, V.f32, ids, {}, double(scale));
            expect_attention_near(out.data() + h * d, lse[h], want, 1e-5,
                                  KernelRegistry::describe(s) + " [" + std::to_string(b) + ", " +
                                      std::to_string(e) + ") head " + std::to_string(h));
          }
        }
    }
  });
}

// A NaN and an infinity in a q8 block (rows 9 and 10 of adversarial_rows): the block's scale is
// NaN (kv_quant.h), so all 32 elements of it read back NaN, in the kernels and in the dequantised
// rows the reference sees alike. In the keys, a range that holds such a row gives NaN (both sides,
// Nan::expected); in the values, exactly the columns of those blocks are NaN; a range that holds
// neither row is a number near the reference's.
TEST(Q8DenseAttention, NonFiniteBlocksGiveNaNWhereTheReferenceDoes) {
  for_each_target([](const char *) {
    for (std::size_t d : {std::size_t(64), std::size_t(128)}) {
      const std::size_t n = 40;
      ref::OwnedMatrix clean = adversarial_rows(n, d, 80 + d, false);
      for (std::size_t j = 0; j < d; ++j)
        clean.at(2, j) = clean.at(11, j); // no infinite logits from the 1e30 row
      for (std::size_t j = 32; j < d; ++j)
        clean.at(6, j) *= 1e-18f;
      const ref::OwnedMatrix bad = adversarial_rows(n, d, 80 + d, true);
      ref::OwnedMatrix bad_rows = clean;
      for (std::size_t j = 0; j < d; ++j) {
        bad_rows.at(9, j) = bad.at(9, j);
        bad_rows.at(10, j) = bad.at(10, j);
      }
      const std::vector<float> q = gaussian(1, 3 * d, 92).data;
      const float scale = float(1.0 / std::sqrt(double(d)));
      for (bool in_keys : {true, false}) {
        const Q8Rows K(in_keys ? bad_rows : clean), V(in_keys ? clean : bad_rows);
        for (auto [b, e] : {std::pair<std::size_t, std::size_t>{0, 40}, {17, 33}, {9, 10}})
          for (const LshKernelSet &s : sets_for(q8_key(10, 150, int(d)))) {
            std::vector<float> out, lse;
            dense_q8(s, q, d, scale, K, V, b, e, out, lse);
            const bool holds = b <= 9 && 9 < e;
            for (std::size_t h = 0; h < 3; ++h) {
              std::vector<std::size_t> ids;
              for (std::size_t i = b; i < e; ++i)
                ids.push_back(i);
              const ref::Attention want =
                  ref::attention_over({q.data() + h * d, d}, K.f32, V.f32, ids, {}, double(scale));
              const std::string what = KernelRegistry::describe(s) +
                                       (in_keys ? " keys" : " values") + " [" + std::to_string(b) +
                                       ", " + std::to_string(e) + ") head " + std::to_string(h);
              if (in_keys || !holds) {
                expect_attention_near(out.data() + h * d, lse[h], want, 1e-5, what,
                                      in_keys && holds ? Nan::expected : Nan::refused);
                continue;
              }
              // Values: the NaN blocks' columns are NaN on both sides, every other column and
              // the lse are numbers near the reference's.
              EXPECT_FALSE(std::isnan(want.lse)) << what;
              EXPECT_NEAR(lse[h], want.lse, 1e-5 * std::max(1.0, std::abs(want.lse))) << what;
              std::size_t nan_columns = 0;
              for (std::size_t j = 0; j < d; ++j) {
                const double w = want.out[j], g = out[h * d + j];
                if (std::isnan(w)) {
                  ++nan_columns;
                  EXPECT_TRUE(std::isnan(g)) << what << " column " << j;
                } else {
                  EXPECT_NEAR(g, w, 1e-4 * std::max(1.0, std::abs(w))) << what << " column " << j;
                }
              }
              // Row 9's NaN (column 3) and row 10's infinity (column d - 1) each spoil one block.
              EXPECT_EQ(nan_columns, e > 10 ? std::size_t(64) : std::size_t(32)) << what;
            }
          }
      }
    }
  });
}

// Builds the reference once, then checks every (target, set): codes, split, sample sets (per
// head and their union, in order) and each head's output and lse, as lsh_test_util.cpp's
// check_magicpig does for f32 and bf16 rows.
void check_magicpig(const Problem &pr, int K, int L, int G, int t, lsh::StaticTokens st, double tol,
                    const ref::TransformSpec &transform = {}, Nan nan = Nan::refused) {
  const lsh::SimHash W(kSeed, pr.d, K, L);
  const ref::OwnedMatrix Wr = ref::simhash_matrix(kSeed, pr.d, K, L);
  const ref::LshConfig cfg{K, L, t, kSeed};
  const ref::LshIndex rix = ref::build_index(pr.K.f32, Wr, cfg, {st.sink, st.local},
                                             ref::Centering::mean_of_indexed, transform);
  const lsh::LogUTableData lut(K, L, t);
  const float scale = float(1.0 / std::sqrt(double(pr.d)));
  std::vector<std::size_t> per_head, uni;
  std::vector<ref::MagicPigResult> want;
  for (int h = 0; h < G; ++h) {
    const std::span<const float> qh(pr.q.data() + std::size_t(h) * pr.d, pr.d);
    want.push_back(ref::magicpig_attention(qh, pr.K.f32, pr.V.f32, Wr, rix, double(scale)));
    per_head.push_back(want.back().sample.size());
    uni.insert(uni.end(), want.back().sample.begin(), want.back().sample.end());
  }
  std::sort(uni.begin(), uni.end());
  uni.erase(std::unique(uni.begin(), uni.end()), uni.end());
  for_each_target([&](const char *) {
    for (const LshKernelSet &s : sets_for(q8_key(K, L, int(pr.d)))) {
      const std::string what = KernelRegistry::describe(s) + " q8 n=" + std::to_string(pr.n) +
                               " G=" + std::to_string(G) + " " + transform.str();
      const lsh::LshIndex ix =
          lsh::LshIndex::build(s, pr.K.data(), DType::q8, pr.n, W, st, transform);
      // Fitted hashing only with a transform and indexed tokens (null otherwise).
      ASSERT_EQ(ix.fitted() != nullptr, !transform.identity() && rix.split.indexed() > 0) << what;
      if (ix.fitted()) {
        ASSERT_EQ(ix.fitted()->transform().key_map.data, rix.transform.key_map.data) << what;
        ASSERT_EQ(ix.fitted()->norm_count(), rix.split.indexed()) << what;
      }
      ASSERT_EQ(ix.mean().size(), rix.mean.size()) << what;
      for (std::size_t j = 0; j < rix.mean.size(); ++j) // equal, or NaN (a NaN key's block)
        ASSERT_TRUE(ix.mean()[j] == rix.mean[j] ||
                    (std::isnan(ix.mean()[j]) && std::isnan(rix.mean[j])))
            << what << " mean " << j << ": " << ix.mean()[j] << " vs " << rix.mean[j];
      ASSERT_EQ(ix.codes(), rix.codes) << what;
      ASSERT_EQ(ix.sink_end(), rix.split.indexed_begin) << what;
      ASSERT_EQ(ix.local_begin(), rix.split.indexed_end) << what;
      lsh::RetrievalScratch scratch(pr.n);
      lsh::StepBuffers buf;
      std::vector<float> out(std::size_t(G) * pr.d), lse(static_cast<std::size_t>(G));
      lsh::StepStats stats;
      for (int rep = 0; rep < 2; ++rep) {
        lsh::sampled_step(s, ix, W, lut, t, scratch, buf,
                          {pr.q.data(), G, scale, out.data(), lse.data()},
                          {pr.K.data(), pr.V.data(), DType::q8, pr.d, {}}, &stats);
        for (int h = 0; h < G; ++h) {
          EXPECT_EQ(stats.sampled_per_head[h], per_head[std::size_t(h)]) << what;
          expect_attention_near(out.data() + std::size_t(h) * pr.d, lse[std::size_t(h)],
                                want[std::size_t(h)].attention, tol,
                                what + " head " + std::to_string(h), nan);
        }
        ASSERT_EQ(stats.sampled_union, uni.size()) << what;
        for (std::size_t i = 0; i < uni.size(); ++i)
          ASSERT_EQ(buf.tokens[i], uni[i]) << what;
      }
    }
  });
}

TEST(Q8SampledAttention, MatchesReferenceOnDequantisedRows) {
  for (int d : {64, 128})
    for (auto [K, L] : {std::pair{10, 150}, std::pair{8, 75}})
      for (int G : {1, 3, 4})
        check_magicpig(make_problem(kN, std::size_t(d), G, 11 + std::uint64_t(G)), K, L, G, 2, {},
                       2e-4);
}

TEST(Q8SampledAttention, StaticRangesAndGroups) {
  // Other sink / local ranges, t = 1, 6 and 8 heads (chunks of 4: per-head masks across
  // chunks over one union of sample sets).
  check_magicpig(make_problem(kN / 2, 64, 3, 51), 10, 150, 3, 1, {1, 7}, 2e-4);
  check_magicpig(make_problem(kN / 2, 128, 2, 52), 8, 75, 2, 2, {16, 0}, 2e-4);
  check_magicpig(make_problem(kN / 2, 64, 6, 53), 10, 150, 6, 2, {4, 64}, 2e-4);
  check_magicpig(make_problem(kN / 2, 64, 8, 54), 8, 75, 8, 2, {0, 32}, 2e-4);
}

TEST(Q8SampledAttention, TinyAndAllStatic) {
  // n below sink + local (everything static), at the edge, and one indexed token.
  for (std::size_t n : {1, 2, 40, 68, 69, 70})
    check_magicpig(make_problem(n, 64, 3, 3 + n), 10, 150, 3, 2, {}, 2e-4);
}

TEST(Q8SampledAttention, FittedHashing) {
  check_magicpig(make_problem(kN, 64, 3, 61), 10, 150, 3, 2, {}, 2e-4,
                 ref::TransformSpec::parse("whiten:a=0.25"));
  check_magicpig(make_problem(kN / 2, 128, 2, 62), 8, 75, 2, 2, {}, 2e-4,
                 ref::TransformSpec::parse("whiten:a=0.5"));
  for (std::size_t n : {40, 69, 80}) // nothing indexed (no fit: null), one, a few
    check_magicpig(make_problem(n, 64, 3, 63 + n), 10, 150, 3, 2, {}, 2e-4,
                   ref::TransformSpec::parse("whiten:a=0.25"));
}

TEST(Q8SampledAttention, AdversarialInputs) {
  const int K = 10, L = 150;
  {
    // An outlier channel in every key and value (one block's scale ~30x the others').
    Problem pr = make_problem(600, 64, 3, 71);
    ref::OwnedMatrix k = pr.K.f32, v = pr.V.f32;
    for (std::size_t i = 0; i < pr.n; ++i) {
      k.at(i, 5) = 30.0f + k.at(i, 5);
      v.at(i, 40) = -25.0f;
    }
    pr.K = Q8Rows(k);
    pr.V = Q8Rows(v);
    check_magicpig(pr, K, L, 3, 2, {}, 2e-4);
    check_magicpig(pr, K, L, 3, 2, {}, 2e-4, ref::TransformSpec::parse("whiten:a=0.25"));
  }
  {
    // All keys equal: every centered key is zero, every token is sampled.
    Problem pr = make_problem(500, 64, 2, 72);
    ref::OwnedMatrix k = pr.K.f32;
    for (std::size_t i = 1; i < pr.n; ++i)
      std::copy(k.row(0), k.row(0) + pr.d, k.row(i));
    pr.K = Q8Rows(k);
    check_magicpig(pr, K, L, 2, 2, {}, 2e-4);
  }
  {
    // A row of zeros among the keys and values, and a zero query.
    Problem pr = make_problem(500, 128, 1, 73);
    ref::OwnedMatrix k = pr.K.f32, v = pr.V.f32;
    std::fill(k.row(200), k.row(201), 0.0f);
    std::fill(v.row(200), v.row(201), 0.0f);
    pr.K = Q8Rows(k);
    pr.V = Q8Rows(v);
    check_magicpig(pr, 8, 75, 1, 2, {}, 2e-4);
    std::fill(pr.q.begin(), pr.q.end(), 0.0f);
    check_magicpig(pr, 8, 75, 1, 2, {}, 2e-4);
  }
  // Huge and tiny scales: keys and values x 1e4, x 1e-4; values x 1e30, x 1e-30.
  for (auto [ks, vs] : {std::pair{1e4, 1.0}, std::pair{1e-4, 1.0}, std::pair{1.0, 1e30},
                        std::pair{1.0, 1e-30}, std::pair{1e-4, 1e-30}})
    check_magicpig(make_problem(500, 64, 3, 74, ks, vs), K, L, 3, 2, {}, 2e-4);
  {
    // NaN in a key (static and indexed): its block reads back NaN; a static key is always
    // attended, so the answer is NaN like the reference's (and like f32 and bf16 rows); the
    // indexed one is not sampled for this query: the answer is the reference's number.
    for (std::size_t row : {2, 300}) {
      Problem pr = make_problem(500, 64, 1, 75);
      ref::OwnedMatrix k = pr.K.f32;
      k.at(row, 5) = kNaN;
      pr.K = Q8Rows(k);
      ASSERT_TRUE(std::isnan(pr.K.f32.at(row, 0))); // the whole block
      ASSERT_FALSE(std::isnan(pr.K.f32.at(row, 40)));
      check_magicpig(pr, K, L, 1, 2, {}, 2e-4, {}, row == 2 ? Nan::expected : Nan::refused);
    }
  }
}

// Incremental indexing over q8 keys (lsh_index_growth_test.cpp with f32 keys): the mean is the
// build's (of the dequantised rows), every token that joins later is encoded from its
// dequantised row minus that mean, across tail merges; retrieval returns pig::ref::sample_set on
// those codes exactly, and the sampled pass over q8 rows matches the reference.
void check_growth(const LshKernelSet &set, std::size_t d, int K, int L, std::size_t n0,
                  std::size_t n_end, std::size_t stride) {
  const std::size_t sink = 4, local = 64;
  const int t = 2;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  ref::OwnedMatrix raw(n_end, d);
  for (std::size_t i = 0; i < n_end; ++i)
    for (std::size_t j = 0; j < d; ++j) // an offset, and an outlier channel every 50 rows
      raw.at(i, j) = nd(rng) + 0.5f + (j == 7 && i % 50 == 0 ? 100.0f : 0.0f);
  const Q8Rows keys(raw);
  const lsh::SimHash W(11, d, K, L);
  lsh::LshIndex ix =
      lsh::LshIndex::build(set, keys.data(), DType::q8, n0, W, lsh::StaticTokens{sink, local});
  ASSERT_EQ(ix.mean(), ref::mean_of_rows(keys.f32, sink, n0 - local));
  ix.drop_codes();
  ix.reserve(n_end);
  const ref::OwnedMatrix Wr = ref::simhash_matrix(11, d, K, L);
  const ref::LshConfig cfg{K, L, t, 11};
  std::vector<std::uint16_t> codes;
  for (std::size_t i = sink; i < n_end - local; ++i) {
    std::vector<float> c(d);
    for (std::size_t j = 0; j < d; ++j)
      c[j] = keys.f32.at(i, j) - ix.mean()[j];
    const auto cc = ref::encode(c, Wr.view(), cfg);
    codes.insert(codes.end(), cc.begin(), cc.end());
  }
  lsh::RetrievalScratch scratch(n_end);
  lsh::StepBuffers buf;
  lsh::LogUTableData log_u(K, L, t);
  std::vector<float> q(3 * d), out(3 * d), lse(3);
  std::size_t merges = 0, last_sorted = ix.layout().count;
  for (std::size_t n = n0; n <= n_end; n += stride) {
    ix.extend(set, keys.data(), DType::q8, n, W);
    ASSERT_EQ(ix.count(), n - sink - local);
    merges += ix.layout().count != last_sorted;
    last_sorted = ix.layout().count;
    for (int G : {1, 3}) {
      for (auto &x : q)
        x = nd(rng);
      lsh::StepStats st;
      lsh::sampled_step(set, ix, W, log_u, t, scratch, buf,
                        {q.data(), G, 0.3f, out.data(), lse.data()},
                        {keys.data(), keys.data(), DType::q8, d, {}}, &st);
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
    // The last step's answer (G = 3) against the reference's estimator over the same index.
    if (n + stride > n_end) {
      ref::LshIndex rix;
      rix.cfg = cfg;
      rix.split = ref::split_tokens(n, ref::StaticConfig{sink, local});
      rix.mean = ix.mean();
      rix.codes.assign(codes.begin(), codes.begin() + std::ptrdiff_t(ix.count()) * L);
      rix.centered = ref::OwnedMatrix(ix.count(), d);
      for (std::size_t i = 0; i < ix.count(); ++i)
        for (std::size_t j = 0; j < d; ++j)
          rix.centered.at(i, j) = keys.f32.at(sink + i, j) - ix.mean()[j];
      const ref::Matrix Kn{keys.f32.data.data(), n, d};
      for (std::size_t h = 0; h < 3; ++h) {
        const ref::MagicPigResult r =
            ref::magicpig_attention({&q[h * d], d}, Kn, Kn, Wr.view(), rix, 0.3);
        expect_attention_near(&out[h * d], lse[h], r.attention, 2e-4,
                              "grown index, head " + std::to_string(h));
      }
    }
  }
  EXPECT_GE(merges, 2u);
}

TEST(Q8IndexGrowth, GenericAcrossMergesAndSegments) {
  // The first merge fills segment 0 (65,535 tokens) and opens segment 1.
  check_growth(lsh::generic_kernel_set(), 32, 4, 6, 65200, 70000, 97);
}

TEST(Q8IndexGrowth, EverySetAcrossMerges) {
  for_each_target([](const char *) {
    for (const LshKernelSet &s : sets_for(q8_key(10, 150, 64))) {
      SCOPED_TRACE(KernelRegistry::describe(s));
      check_growth(s, 64, 10, 150, 1500, 2400, 61);
    }
  });
}

} // namespace
} // namespace pig::test
