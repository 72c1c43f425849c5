// Every LSH kernel against pig::ref, for generic and specialised sets, on every compiled target.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "pig/reference/attention.h"
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

constexpr std::uint64_t kSeed = 1234;
// Problem size of the synthetic tests (smaller in the -O0 sanitizer build, same code paths).
constexpr std::size_t kN = PIG_KERNELS_TEST_SMALL ? 800 : 3000;

struct Config {
  int K, L, d;
};
// The paper's two main configurations at both head dims, plus odd shapes for the generic path.
const Config kConfigs[] = {{10, 150, 64}, {10, 150, 128}, {8, 75, 64}, {8, 75, 128}};

// The sets to test for one key on the current target: the generic one, the specialised one
// when the test binary registered it, and the generic sets compiled with other schedules
// (schedules.cpp: every value of the tested ranges of every knob).
std::vector<LshKernelSet> sets_for(const KernelKey &key) {
  std::vector<LshKernelSet> out;
  LshKernelSet g = lsh::generic_kernel_set();
  g.key = key;
  out.push_back(g);
  if (KernelRegistry::global().has_specialised(key))
    out.push_back(KernelRegistry::global().resolve(key));
  for (LshKernelSet s : scheduled_generic_sets()) {
    const lsh::Schedule sched = s.key.schedule;
    s.key = key;
    s.key.schedule = sched;
    out.push_back(s);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

TEST(Registry, ResolvesSpecialisedAndGeneric) {
  const KernelKey key{10, 150, 64, DType::bf16, lsh::Target::cpu};
  ASSERT_TRUE(KernelRegistry::global().has_specialised(key)); // generated_example.cpp
  const LshKernelSet s = KernelRegistry::global().resolve(key);
  EXPECT_TRUE(s.specialised);
  EXPECT_EQ(s.key, key);
  EXPECT_NE(KernelRegistry::describe(s).find("specialised K=10 L=150 d=64 bf16 cpu"),
            std::string::npos);
  const KernelKey other{9, 120, 64, DType::bf16, lsh::Target::cpu};
  const LshKernelSet g = KernelRegistry::global().resolve(other);
  EXPECT_FALSE(g.specialised);
  EXPECT_EQ(g.key, other);
  EXPECT_NE(KernelRegistry::describe(g).find("generic"), std::string::npos);
  EXPECT_THROW(KernelRegistry::global().resolve({17, 150, 64, DType::bf16, lsh::Target::cpu}),
               std::invalid_argument);
  EXPECT_THROW(KernelRegistry::global().resolve({10, 150, 63, DType::bf16, lsh::Target::cpu}),
               std::invalid_argument);
  EXPECT_THROW(KernelRegistry::global().resolve({10, 150, 64, DType::bf16, lsh::Target::cuda}),
               std::invalid_argument);
}

// resolve(): the exact key (schedule included), else the default schedule's set of the same
// configuration, else the generic set; the served key and the fallback are reported.
LshKernelSet GenericFactory() { return lsh::generic_kernel_set(); }

TEST(Registry, ResolvesSchedules) {
  KernelRegistry r;
  lsh::Schedule s32;
  s32.block = 32;
  lsh::Schedule s16 = s32;
  s16.block = 16;
  const KernelKey plain{10, 150, 64, DType::bf16, lsh::Target::cpu};
  KernelKey k32 = plain, k16 = plain;
  k32.schedule = s32;
  k16.schedule = s16;
  r.add(plain, &GenericFactory);
  r.add(k32, &GenericFactory);
  // Exact.
  LshKernelSet e = r.resolve(k32);
  EXPECT_TRUE(e.specialised);
  EXPECT_FALSE(e.schedule_fallback);
  EXPECT_EQ(e.key, k32);
  EXPECT_NE(KernelRegistry::describe(e).find("schedule gqa=per_head block=32 prefetch=8"),
            std::string::npos)
      << KernelRegistry::describe(e);
  // Not registered: the default schedule of the same configuration, and describe() says so.
  LshKernelSet f = r.resolve(k16);
  EXPECT_TRUE(f.specialised);
  EXPECT_TRUE(f.schedule_fallback);
  EXPECT_EQ(f.key, plain);
  EXPECT_EQ(f.requested_schedule, s16);
  EXPECT_NE(KernelRegistry::describe(f).find("(schedule gqa=per_head block=16 prefetch=8 "
                                             "dense_prefetch=64 tables_ahead=8 parts=0 not "
                                             "registered: default served)"),
            std::string::npos)
      << KernelRegistry::describe(f);
  // Another configuration: generic, default schedule.
  KernelKey other = k16;
  other.L = 120;
  LshKernelSet g = r.resolve(other);
  EXPECT_FALSE(g.specialised);
  EXPECT_TRUE(g.schedule_fallback);
  EXPECT_EQ(g.key.schedule, lsh::Schedule{});
  EXPECT_EQ(g.key.L, 120);
  // An illegal schedule is refused with the knob's message.
  KernelKey bad = plain;
  bad.schedule.block = 48;
  try {
    (void)r.resolve(bad);
    ADD_FAILURE() << "block=48 accepted";
  } catch (const std::invalid_argument &ex) {
    EXPECT_NE(std::string(ex.what()).find("schedule knob 'block' = 48 is illegal"),
              std::string::npos)
        << ex.what();
  }
}

TEST(Schedule, ParsePrintAndValidate) {
  std::string err;
  const auto s = lsh::Schedule::parse("block=32,gqa=union tables_ahead=0", &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->block, 32);
  EXPECT_EQ(s->gqa, lsh::GqaStrategy::union_rows);
  EXPECT_EQ(s->tables_ahead, 0);
  EXPECT_EQ(s->prefetch, 8);
  EXPECT_EQ(s->str(), "gqa=union block=32 prefetch=8 dense_prefetch=64 tables_ahead=0 parts=0");
  EXPECT_EQ(lsh::Schedule::parse(s->str(), &err), s);
  EXPECT_EQ(s->symbol(), "g1_b32_p8_dp64_ta0_pa0");
  const std::pair<const char *, const char *> bad[] = {
      {"block=48", "schedule knob 'block' = 48 is illegal"},
      {"block=256", "schedule knob 'block' = 256 is illegal"},
      {"prefetch=-1", "schedule knob 'prefetch' = -1 is illegal"},
      {"dense_prefetch=257", "'dense_prefetch' = 257 is illegal"},
      {"tables_ahead=65", "'tables_ahead' = 65 is illegal"},
      {"parts=9", "'parts' = 9 is illegal"},
      {"gqa=both", "schedule knob 'gqa' expects per_head or union, got 'both'"},
      {"block=3x", "schedule knob 'block' expects an integer, got '3x'"},
      {"block", "schedule item 'block' is not knob=value"},
      {"rows=64", "unknown schedule knob 'rows'"},
      {"block=32 block=64", "schedule knob 'block' is given twice"},
  };
  for (const auto &[text, want] : bad) {
    err.clear();
    EXPECT_FALSE(lsh::Schedule::parse(text, &err)) << text;
    EXPECT_NE(err.find(want), std::string::npos) << text << ": " << err;
  }
  EXPECT_EQ(lsh::Schedule{}.validate(), "");
}

TEST(Registry, EveryTargetServesTheExample) {
  for_each_target([](const char *name) {
    const LshKernelSet s =
        KernelRegistry::global().resolve({10, 150, 64, DType::bf16, lsh::Target::cpu});
    EXPECT_TRUE(s.specialised);
    EXPECT_STREQ(s.simd_target, name);
    EXPECT_STREQ(lsh::generic_kernel_set().simd_target, name);
  });
}

TEST(SimHash, BitIdenticalToReference) {
  for (const Config &c : kConfigs) {
    const lsh::SimHash W(kSeed, std::size_t(c.d), c.K, c.L);
    const ref::OwnedMatrix R = ref::simhash_matrix(kSeed, std::size_t(c.d), c.K, c.L);
    for (std::size_t r = 0; r < R.rows; ++r)
      for (std::size_t col = 0; col < R.cols; ++col)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(W.at(r, col)),
                  std::bit_cast<std::uint32_t>(R.at(r, col)));
  }
}

// Rows that stress the sign decisions: near-orthogonal to columns, zero, tiny, subnormal, huge,
// NaN, and copies of each other.
ref::OwnedMatrix adversarial_rows(std::size_t d, std::uint64_t seed) {
  ref::OwnedMatrix m = gaussian(40, d, seed);
  for (std::size_t j = 0; j < d; ++j) {
    m.at(0, j) = 0.0f;
    m.at(1, j) *= 1e-30f;
    m.at(2, j) *= 1e30f;
    m.at(3, j) = m.at(4, j);
    m.at(6, j) = 1e-3f;   // all equal entries: many projections near 0 relative to the norm
    m.at(8, j) *= 1e-37f; // projections near the smallest normal float, products below it
    m.at(9, j) *= 1e-41f; // subnormal entries: every product underflows
  }
  m.at(5, 3) = std::numeric_limits<float>::quiet_NaN();
  m.at(7, 0) = std::numeric_limits<float>::infinity();
  return m;
}

TEST(Encode, CodesEqualReference) {
  for_each_target([](const char *) {
    for (const Config &c : kConfigs) {
      const lsh::SimHash W(kSeed, std::size_t(c.d), c.K, c.L);
      const ref::OwnedMatrix Wr = ref::simhash_matrix(kSeed, std::size_t(c.d), c.K, c.L);
      const ref::LshConfig cfg{c.K, c.L, 2, kSeed};
      const Rows x(adversarial_rows(std::size_t(c.d), 7 + std::uint64_t(c.d)));
      const std::vector<std::uint16_t> want = ref::encode_rows(x.f32, Wr, cfg);
      for (DType dt : {DType::f32, DType::bf16})
        for (const LshKernelSet &s : sets_for({c.K, c.L, c.d, DType::bf16, lsh::Target::cpu})) {
          std::vector<std::uint16_t> got(want.size(), 0xFFFF);
          lsh::EncodeArgs a;
          a.x = x.data(dt);
          a.dtype = dt;
          a.rows = x.f32.rows;
          a.W = W.view();
          a.codes = got.data();
          s.encode(a);
          ASSERT_EQ(got, want) << KernelRegistry::describe(s) << " " << lsh::to_string(dt);
          // Row counts that leave a partial block of rows (the kernels project up to 8 at once,
          // padding some counts with zero rows): the codes of the rows asked for, nothing past.
          for (std::size_t rows : {1, 2, 3, 5, 6, 7, 9, 12, 13}) {
            std::fill(got.begin(), got.end(), 0xFFFF);
            a.rows = rows;
            s.encode(a);
            const std::size_t L = std::size_t(c.L);
            ASSERT_TRUE(std::equal(want.begin(), want.begin() + rows * L, got.begin()))
                << KernelRegistry::describe(s) << " rows " << rows;
            ASSERT_TRUE(std::all_of(got.begin() + rows * L, got.end(),
                                    [](std::uint16_t v) { return v == 0xFFFF; }))
                << "codes written past row " << rows;
          }
        }
    }
  });
}

// One problem shaped like real attention, in both dtypes.
struct Problem {
  Rows K, V;
  std::vector<float> q; // G * d
  std::size_t n, d;
};

Problem make_problem(std::size_t n, std::size_t d, int G, std::uint64_t seed) {
  ref::SyntheticConfig sc;
  sc.n = n;
  sc.d = d;
  sc.seed = seed;
  ref::AttentionProblem p = ref::synthetic_problem(sc);
  Problem pr{Rows(std::move(p.K)), Rows(std::move(p.V)), {}, n, d};
  // Heads of one group: the synthetic query plus a per-head perturbation.
  ref::Rng rng(seed + 99);
  for (int h = 0; h < G; ++h)
    for (std::size_t j = 0; j < d; ++j)
      pr.q.push_back(p.q[j] + float(h == 0 ? 0.0 : 0.5 * rng.gaussian()));
  return pr;
}

// Builds the reference once, then checks every (target, dtype, set): codes, split, sample sets
// (per head and their union, in order) and the estimator's output and lse per head.
// With a transform (fitted hashing), the same against ref::build_index with that transform.
void check_magicpig(const Problem &pr, const Config &c, int G, int t, lsh::StaticTokens st,
                    double tol, const ref::TransformSpec &transform = {}) {
  const lsh::SimHash W(kSeed, pr.d, c.K, c.L);
  const ref::OwnedMatrix Wr = ref::simhash_matrix(kSeed, pr.d, c.K, c.L);
  const ref::LshConfig cfg{c.K, c.L, t, kSeed};
  const ref::LshIndex rix = ref::build_index(pr.K.f32, Wr, cfg, {st.sink, st.local},
                                             ref::Centering::mean_of_indexed, transform);
  const lsh::LogUTableData lut(c.K, c.L, t);
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
    for (DType dt : {DType::f32, DType::bf16})
      for (const LshKernelSet &s : sets_for({c.K, c.L, int(pr.d), dt, lsh::Target::cpu})) {
        const std::string what = KernelRegistry::describe(s) + " " + lsh::to_string(dt) +
                                 " n=" + std::to_string(pr.n) + " G=" + std::to_string(G) + " " +
                                 transform.str();
        const lsh::LshIndex ix = lsh::LshIndex::build(s, pr.K.data(dt), dt, pr.n, W, st, transform);
        ASSERT_EQ(ix.fitted() != nullptr, !transform.identity() && rix.split.indexed() > 0) << what;
        if (ix.fitted()) { // the reference's maps, bit for bit; |k'| to f32 rounding
          ASSERT_EQ(ix.fitted()->transform().key_map.data, rix.transform.key_map.data) << what;
          ASSERT_EQ(ix.fitted()->norm_count(), rix.split.indexed()) << what;
          for (std::size_t i = 0; i < rix.split.indexed(); ++i) {
            const std::span<const float> k = rix.hashed.row_span(i);
            double n2 = 0;
            for (float x : k)
              n2 += double(x) * double(x);
            if (std::isnan(n2)) // a NaN key: NaN norm (the sampled pass's answer is NaN anyway)
              ASSERT_TRUE(std::isnan(ix.fitted()->key_norms()[i])) << what << " token " << i;
            else
              ASSERT_NEAR(ix.fitted()->key_norms()[i], std::sqrt(n2), 1e-5 * std::sqrt(n2) + 1e-6)
                  << what << " token " << i;
          }
        }
        ASSERT_EQ(ix.codes(), rix.codes) << what;
        ASSERT_EQ(ix.sink_end(), rix.split.indexed_begin) << what;
        ASSERT_EQ(ix.local_begin(), rix.split.indexed_end) << what;
        lsh::RetrievalScratch scratch(pr.n);
        lsh::StepBuffers buf;
        std::vector<float> out(std::size_t(G) * pr.d), lse(static_cast<std::size_t>(G));
        lsh::StepStats stats;
        for (int rep = 0; rep < 2; ++rep) { // the second step reuses the epoch-stamped scratch
          lsh::sampled_step(s, ix, W, lut, t, scratch, buf,
                            {pr.q.data(), G, scale, out.data(), lse.data()},
                            {pr.K.data(dt), pr.V.data(dt), dt, pr.d}, &stats);
          for (int h = 0; h < G; ++h) {
            EXPECT_EQ(stats.sampled_per_head[h], per_head[std::size_t(h)]) << what;
            expect_attention_near(out.data() + std::size_t(h) * pr.d, lse[std::size_t(h)],
                                  want[std::size_t(h)].attention, tol,
                                  what + " head " + std::to_string(h));
          }
          ASSERT_EQ(stats.sampled_union, uni.size()) << what;
          for (std::size_t i = 0; i < uni.size(); ++i)
            ASSERT_EQ(buf.tokens[i], uni[i]) << what;
        }
      }
  });
}

TEST(SampledAttention, MatchesReferenceOnSyntheticProblems) {
  for (const Config &c : kConfigs)
    for (int G : {1, 3}) {
      const Problem pr = make_problem(kN, std::size_t(c.d), G, 11);
      check_magicpig(pr, c, G, 2, {}, 2e-4);
    }
}

// Hashing in a space fitted to the keys (whitening, the transform the runtime serves): the fit,
// the mapped keys and queries, the stored norms and the kernels' u against pig::ref.
TEST(SampledAttention, FittedHashingMatchesReference) {
  for (const Config &c : kConfigs) // a group of 3 (one head: the adversarial cases below)
    check_magicpig(make_problem(kN, std::size_t(c.d), 3, 17), c, 3, 2, {}, 2e-4,
                   ref::TransformSpec::parse("whiten:a=0.25"));
  for (const char *spec : {"whiten:a=0.5", "whiten:a=1"}) // stronger maps, one configuration
    check_magicpig(make_problem(kN / 2, 64, 3, 19), {8, 75, 64}, 3, 2, {}, 2e-4,
                   ref::TransformSpec::parse(spec));
  // 6 heads in two chunks (the query norms of the second chunk are offset), and a tiny index.
  check_magicpig(make_problem(kN / 2, 64, 6, 18), {8, 75, 64}, 6, 2, {}, 2e-4,
                 ref::TransformSpec::parse("whiten:a=0.25"));
  for (std::size_t n : {69, 70, 80})
    check_magicpig(make_problem(n, 64, 3, 3 + n), {10, 150, 64}, 3, 2, {}, 2e-4,
                   ref::TransformSpec::parse("whiten:a=0.25"));
}

TEST(SampledAttention, FittedHashingAdversarialInputs) {
  const Config c{8, 75, 64};
  const ref::TransformSpec whiten = ref::TransformSpec::parse("whiten:a=0.5");
  {
    // All keys equal: nothing to fit (the identity), every norm 0, every token sampled.
    Problem pr = make_problem(500, 64, 2, 31);
    for (std::size_t i = 1; i < pr.n; ++i)
      for (std::size_t j = 0; j < pr.d; ++j) {
        pr.K.f32.at(i, j) = pr.K.f32.at(0, j);
        pr.K.bf16[i * pr.d + j] = pr.K.bf16[j];
      }
    check_magicpig(pr, c, 2, 2, {}, 2e-4, whiten);
  }
  {
    // Keys of rank 2 (a degenerate covariance: 62 eigenvalues floored) with huge norms.
    Problem pr = make_problem(500, 64, 1, 32);
    ref::Rng rng(33);
    for (std::size_t i = 0; i < pr.n; ++i) {
      const double a = 1e3 * rng.gaussian(), b = 1e3 * rng.gaussian();
      for (std::size_t j = 0; j < pr.d; ++j)
        pr.K.f32.at(i, j) = float(j % 2 ? a : b);
    }
    pr.K = Rows(std::move(pr.K.f32)); // bf16-exact again
    check_magicpig(pr, c, 1, 2, {}, 2e-4, whiten);
  }
  {
    // NaN in a key: left out of the fit; the answer is NaN like the reference's.
    Problem pr = make_problem(500, 64, 1, 34);
    pr.K.f32.at(200, 5) = std::numeric_limits<float>::quiet_NaN();
    pr.K.bf16[200 * pr.d + 5] = 0x7FC0;
    check_magicpig(pr, c, 1, 2, {}, 2e-4, whiten);
  }
}

TEST(SampledAttention, GroupsLargerThanOneChunk) {
  // 6 heads run as chunks of 4 and 2 over one union of sample sets.
  check_magicpig(make_problem(kN / 2, 64, 6, 13), {8, 75, 64}, 6, 2, {}, 2e-4);
}

TEST(SampledAttention, ThresholdOneAndOddShapes) {
  // t = 1, a head dim that is not a multiple of any vector width, a tiny configuration.
  check_magicpig(make_problem(700, 50, 2, 5), {6, 12, 50}, 2, 1, {4, 64}, 2e-4);
  check_magicpig(make_problem(300, 16, 1, 6), {3, 5, 16}, 1, 2, {1, 7}, 2e-4);
}

TEST(SampledAttention, ThresholdsAroundTheByteCounters) {
  // The epoch-stamped u8 counters serve t <= kMaxEpochT (a count saturates at t + 1 within a
  // byte's epoch); larger t counts in 16 bits per head. Both sides of the boundary, one and two
  // heads, against the reference's sample sets.
  static_assert(lsh::kMaxEpochT == 254);
  // Every third key lies near the query's direction at a spread of angles (so its count of
  // 300 collisions falls on both sides of these t); the others point away. Their mean is ~0,
  // so centering keeps the directions.
  const std::size_t n = 600, d = 16;
  ref::Rng rng(23);
  std::vector<float> q(2 * d);
  for (std::size_t j = 0; j < d; ++j) {
    q[j] = float(rng.gaussian());
    q[d + j] = q[j] + float(0.1 * rng.gaussian());
  }
  ref::OwnedMatrix K(n, d);
  for (std::size_t i = 0; i < n; ++i) {
    const bool near = i % 3 == 0;
    const double c = near ? 1.0 : -0.5, noise = near ? 0.02 + 0.6 * double(i % 21) / 20 : 1.0;
    for (std::size_t j = 0; j < d; ++j)
      K.row(i)[j] = float(c * q[j] + noise * rng.gaussian());
  }
  const Problem pr{Rows(std::move(K)), Rows(gaussian(n, d, 24)), q, n, d};
  for (int t : {253, 254, 255, 270})
    for (int G : {1, 2})
      check_magicpig(pr, {1, 300, int(d)}, G, t, {2, 8}, 2e-4);
}

TEST(SampledAttention, TinyAndAllStatic) {
  for (std::size_t n : {1, 2, 40, 68, 69, 70})
    check_magicpig(make_problem(n, 64, 3, 3 + n), {10, 150, 64}, 3, 2, {}, 2e-4);
}

TEST(SampledAttention, AdversarialInputs) {
  {
    const Config c{8, 75, 64};
    {
      // All keys equal: centered keys are zero (cosine 0 by convention), every token collides
      // in every table and is sampled.
      Problem pr = make_problem(500, 64, 2, 21);
      for (std::size_t i = 1; i < pr.n; ++i)
        for (std::size_t j = 0; j < pr.d; ++j) {
          pr.K.f32.at(i, j) = pr.K.f32.at(0, j);
          pr.K.bf16[i * pr.d + j] = pr.K.bf16[j];
        }
      check_magicpig(pr, c, 2, 2, {}, 2e-4);
    }
    {
      // Zero query: every code is 0, every logit 0.
      Problem pr = make_problem(500, 64, 1, 22);
      std::fill(pr.q.begin(), pr.q.end(), 0.0f);
      check_magicpig(pr, c, 1, 2, {}, 2e-4);
    }
    {
      // Huge norms (logits ~1e5): a one-hot softmax, no overflow anywhere.
      Problem pr = make_problem(500, 64, 1, 23);
      for (float &x : pr.q)
        x *= 1000.0f;
      check_magicpig(pr, c, 1, 2, {}, 2e-4);
    }
    {
      // NaN in a sampled-or-static key: the reference's answer is NaN, and so is ours.
      Problem pr = make_problem(500, 64, 1, 24);
      pr.K.f32.at(2, 5) = std::numeric_limits<float>::quiet_NaN();
      pr.K.bf16[2 * pr.d + 5] = 0x7FC0;
      check_magicpig(pr, c, 1, 2, {}, 2e-4);
    }
  }
}

TEST(DenseAttention, MatchesReference) {
  for_each_target([](const char *) {
    for (std::size_t d : {std::size_t(64), std::size_t(128), std::size_t(18)})
      for (std::size_t n : {0, 1, 15, 16, 17, 63, 64, 65, 129, 300}) // vector and block edges
        for (int G : {1, 3}) {
          const Problem pr = make_problem(std::max<std::size_t>(n, 1), d, G, 40 + n);
          const float scale = float(1.0 / std::sqrt(double(d)));
          for (DType dt : {DType::f32, DType::bf16})
            for (const LshKernelSet &s : sets_for({10, 150, int(d), dt, lsh::Target::cpu})) {
              std::vector<float> out(std::size_t(G) * d), lse(static_cast<std::size_t>(G));
              lsh::DenseAttentionArgs a;
              a.q = pr.q.data();
              a.G = G;
              a.d = d;
              a.scale = scale;
              a.k = pr.K.data(dt);
              a.v = pr.V.data(dt);
              a.dtype = dt;
              a.begin = 0;
              a.end = n;
              a.out = out.data();
              a.lse = lse.data();
              s.dense_attention(a);
              for (int h = 0; h < G; ++h) {
                const std::span<const float> qh(pr.q.data() + std::size_t(h) * d, d);
                const ref::Matrix Kn{pr.K.f32.data.data(), n, d}, Vn{pr.V.f32.data.data(), n, d};
                const ref::Attention want = ref::dense_attention(qh, Kn, Vn, double(scale));
                expect_attention_near(out.data() + std::size_t(h) * d, lse[std::size_t(h)], want,
                                      1e-5, KernelRegistry::describe(s));
              }
            }
        }
  });
}

TEST(Merge, MatchesReference) {
  for_each_target([](const char *) {
    const std::size_t d = 64;
    const LshKernelSet s = lsh::generic_kernel_set();
    const std::vector<std::pair<float, float>> lses = {
        {1.5f, -2.0f},      {-HUGE_VALF, 0.5f},
        {3.0f, -HUGE_VALF}, {-HUGE_VALF, -HUGE_VALF},
        {80.0f, 80.0f},     {std::numeric_limits<float>::quiet_NaN(), 1.0f}};
    const ref::OwnedMatrix o = gaussian(2, d, 77);
    for (const auto &[la, lb] : lses) {
      ref::Attention a{std::vector<float>(o.row(0), o.row(0) + d), la};
      ref::Attention b{std::vector<float>(o.row(1), o.row(1) + d), lb};
      if (la == -HUGE_VALF)
        a = ref::Attention::empty(d);
      if (lb == -HUGE_VALF)
        b = ref::Attention::empty(d);
      const ref::Attention want = ref::merge(a, b);
      std::vector<float> out(d);
      float lse = 0;
      lsh::MergeArgs m;
      m.out_a = a.out.data();
      m.lse_a = &la;
      m.out_b = b.out.data();
      m.lse_b = &lb;
      m.d = d;
      m.out = out.data();
      m.lse = &lse;
      s.merge(m);
      if (std::isnan(want.lse)) {
        EXPECT_TRUE(std::isnan(lse));
        continue;
      }
      EXPECT_EQ(lse == -HUGE_VALF, want.is_empty());
      if (!want.is_empty()) {
        EXPECT_NEAR(lse, want.lse, 1e-6 * std::max(1.0, std::fabs(want.lse)));
      }
      EXPECT_LT(rel_l2(out.data(), want.out), 1e-6);
    }
  });
}

TEST(Index, SegmentsBeyondSixteenBitIds) {
  // More indexed tokens than one u16 segment holds: ids and offsets must cross segments.
  const Config c{4, 6, 16};
  const std::size_t n = lsh::kSegmentTokens + 5000;
  const Problem pr = make_problem(n, 16, 1, 31);
  check_magicpig(pr, c, 1, 3, {}, 5e-4);
}

TEST(Index, BytesPerToken) {
  const lsh::IndexLayout lay = lsh::IndexLayout::of(131072, 10, 150);
  // 2 L bytes of ids plus 2 (2^K + 1) L / 65535 bytes of offsets per full segment.
  EXPECT_EQ(lay.segments, 3u); // 65535-token segments
  EXPECT_NEAR(lay.bytes_per_token(), 300.0 + 2.0 * 1025 * 150 * 3 / 131072.0, 1e-9);
  EXPECT_LT(lay.bytes_per_token(), 4 * 150 / 1.95); // vs the public 4 L: < 51 %
}

} // namespace
} // namespace pig::test
