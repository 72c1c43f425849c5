// Shared by the LSH kernel tests (lsh_*_test.cpp): the configurations tested, the kernel sets
// for one key, a synthetic problem and check_magicpig, which runs the whole sampled step of every
// set on every target against pig::ref.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pig/reference/transform.h"
#include "schedules.h"
#include "test_util.h"

namespace pig::test {

inline constexpr std::uint64_t kSeed = 1234;
// Problem size of the synthetic tests (smaller in the -O0 sanitizer build, same code paths).
inline constexpr std::size_t kN = PIG_KERNELS_TEST_SMALL ? 800 : 3000;

struct Config {
  int K, L, d;
};
// The paper's two main configurations at both head dims, plus odd shapes for the generic path.
inline constexpr Config kConfigs[] = {{10, 150, 64}, {10, 150, 128}, {8, 75, 64}, {8, 75, 128}};

// sets_for(key): schedules.h.

// One problem shaped like real attention, in both dtypes.
struct Problem {
  Rows K, V;
  std::vector<float> q; // G * d
  std::size_t n, d;
};

Problem make_problem(std::size_t n, std::size_t d, int G, std::uint64_t seed);

// Builds the reference once, then checks every (target, dtype, set): codes, split, sample sets
// (per head and their union, in order) and the estimator's output and lse per head.
// With a transform (fitted hashing), the same against ref::build_index with that transform.
/// `nan`: whether the answer is expected to be NaN (a NaN key); else a NaN answer fails.
/// `rule`: the threshold t, or {t, r} with a multi-probe radius r.
void check_magicpig(const Problem &pr, const Config &c, int G, lsh::SampleRule rule,
                    lsh::StaticTokens st, double tol, const ref::TransformSpec &transform = {},
                    Nan nan = Nan::refused);

} // namespace pig::test
