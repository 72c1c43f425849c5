// The shared helpers of the LSH kernel tests (lsh_test_util.h).
#include "lsh_test_util.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "pig/reference/attention.h"
#include "pig/reference/lsh.h"
#include "pig/reference/magicpig.h"
#include "pig/reference/random.h"
#include "pig/reference/synthetic.h"
#include "schedules.h"

namespace pig::test {

using lsh::DType;
using lsh::KernelKey;
using lsh::KernelRegistry;
using lsh::LshKernelSet;

std::vector<LshKernelSet> sets_for(const KernelKey &key) {
  std::vector<LshKernelSet> out;
  LshKernelSet g = lsh::generic_kernel_set();
  g.key = key;
  out.push_back(g);
  // The test-only sets may be compiled for this machine's best target and scalar alone
  // (cmake/PigNativeTargets.cmake): on another pinned target they would run their scalar code,
  // which the scalar target already tests, so they run on the target they were compiled for.
  const auto same_target = [&g](const LshKernelSet &s) {
    return std::string_view(s.simd_target) == g.simd_target;
  };
  if (KernelRegistry::global().has_specialised(key)) {
    const LshKernelSet s = KernelRegistry::global().resolve(key);
    if (same_target(s))
      out.push_back(s);
  }
  for (LshKernelSet s : scheduled_generic_sets()) {
    if (!same_target(s))
      continue;
    const lsh::Schedule sched = s.key.schedule;
    s.key = key;
    s.key.schedule = sched;
    out.push_back(s);
  }
  return out;
}

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

void check_magicpig(const Problem &pr, const Config &c, int G, lsh::SampleRule rule,
                    lsh::StaticTokens st, double tol, const ref::TransformSpec &transform,
                    Nan nan) {
  const int t = rule.t;
  const lsh::SimHash W(kSeed, pr.d, c.K, c.L);
  const ref::OwnedMatrix Wr = ref::simhash_matrix(kSeed, pr.d, c.K, c.L);
  const ref::LshConfig cfg{c.K, c.L, t, kSeed, rule.r};
  const ref::LshIndex rix = ref::build_index(pr.K.f32, Wr, cfg, {st.sink, st.local},
                                             ref::Centering::mean_of_indexed, transform);
  const lsh::LogUTableData lut(c.K, c.L, t, rule.r);
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
                                 " n=" + std::to_string(pr.n) + " G=" + std::to_string(G) +
                                 " r=" + std::to_string(rule.r) + " " + transform.str();
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
          lsh::sampled_step(s, ix, W, lut, rule, scratch, buf,
                            {pr.q.data(), G, scale, out.data(), lse.data()},
                            {pr.K.data(dt), pr.V.data(dt), dt, pr.d, {}}, &stats);
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

} // namespace pig::test
