// Shared helpers of the kernel tests: target loops, random and synthetic data, bf16 copies.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hwy/targets.h"
#include "pig/reference/attention.h"
#include "pig/reference/matrix.h"
#include "pig/reference/random.h"
#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_kernels.h"
#include "pig/runtime/lsh_step.h"

namespace pig::test {

namespace lsh = pig::runtime::lsh;

/// Runs fn once per compiled Highway target this CPU supports, with dynamic dispatch pinned to it.
inline void for_each_target(const std::function<void(const char *)> &fn) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    fn(hwy::TargetName(target));
  }
  hwy::SetSupportedTargetsForTest(0);
}

/// Keys/values in both layouts: f32 values exactly representable in bf16 (so the reference sees
/// the same numbers whichever dtype the kernel reads).
struct Rows {
  ref::OwnedMatrix f32; // n x d, bf16-exact
  std::vector<std::uint16_t> bf16;

  explicit Rows(ref::OwnedMatrix m) : f32(std::move(m)), bf16(f32.data.size()) {
    lsh::convert_to_bf16(f32.data.data(), bf16.data(), bf16.size());
    lsh::convert_from_bf16(bf16.data(), f32.data.data(), bf16.size());
  }
  const void *data(lsh::DType t) const {
    return t == lsh::DType::f32 ? static_cast<const void *>(f32.data.data())
                                : static_cast<const void *>(bf16.data());
  }
};

inline ref::OwnedMatrix gaussian(std::size_t n, std::size_t d, std::uint64_t seed,
                                 double scale = 1.0, double offset = 0.0) {
  ref::Rng rng(seed);
  ref::OwnedMatrix m(n, d);
  for (float &x : m.data)
    x = float(offset + scale * rng.gaussian());
  return m;
}

inline double rel_l2(const float *a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

/// Whether a check expects the answer to be NaN (a NaN or an infinite key or value the maths
/// leaves undefined), or a number (the default).
enum class Nan { refused, expected };

/// A kernel's output and lse against the reference's: the empty attention where it is empty,
/// else within `tol` (relative L2 of the output, relative lse). A NaN answer is accepted only
/// where the check says it is expected (Nan::expected), and there both must be NaN: a reference
/// gone NaN where a number was expected fails instead of passing against a NaN kernel.
inline void expect_attention_near(const float *out, float lse, const ref::Attention &want,
                                  double tol, const std::string &what, Nan nan = Nan::refused) {
  if (nan == Nan::expected) {
    EXPECT_TRUE(std::isnan(want.lse)) << what << ": the reference's answer is not NaN";
    EXPECT_TRUE(std::isnan(lse)) << what << ": the kernel's answer is not NaN";
    return;
  }
  ASSERT_FALSE(std::isnan(want.lse)) << what << ": the reference's answer is NaN";
  ASSERT_FALSE(std::isnan(lse)) << what << ": the kernel's lse is NaN";
  if (want.is_empty()) {
    EXPECT_EQ(lse, -HUGE_VALF) << what;
    return;
  }
  for (std::size_t j = 0; j < want.out.size(); ++j)
    ASSERT_FALSE(std::isnan(out[j])) << what << " coordinate " << j;
  EXPECT_LT(rel_l2(out, want.out), tol) << what;
  EXPECT_NEAR(lse, want.lse, tol * std::max(1.0, std::fabs(want.lse))) << what;
}

} // namespace pig::test
