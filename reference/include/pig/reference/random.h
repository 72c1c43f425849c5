// Deterministic, platform-independent random numbers, and the SimHash matrix W.
//
// std::normal_distribution (and every std distribution) is implementation-defined: libstdc++,
// libc++ and MSVC produce different sequences from the same engine. W must be identical on every
// machine and in every kernel, so the generator is written out here:
//   seed --splitmix64--> xoshiro256** state; uniform doubles from the top 53 bits;
//   Gaussians by Box-Muller in double, rounded to float once at the end.
// The integer part is exact everywhere. Box-Muller calls std::log, std::sqrt, std::cos and
// std::sin in double; sqrt is correctly rounded by IEEE 754, and the other three agree between
// mainstream libms to within an ulp of double, which the final rounding to float absorbs except
// with probability ~2^-29 per value. Kernels therefore receive W from simhash_matrix() (generated
// once on the host) rather than regenerating it; the golden-value test pins the sequence.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "pig/reference/matrix.h"

namespace pig::ref {

/// splitmix64: advances `state` and returns the next output. Used to expand one 64-bit seed into
/// the 256-bit xoshiro state (the seeding its authors recommend).
std::uint64_t splitmix64(std::uint64_t &state);

/// xoshiro256** with splitmix64 seeding, plus the few distributions the reference needs.
class Rng {
public:
  explicit Rng(std::uint64_t seed);
  /// Start from an explicit xoshiro256** state (not all zero), e.g. to check the published
  /// reference outputs.
  explicit Rng(const std::array<std::uint64_t, 4> &state);

  std::uint64_t next_u64();
  /// Uniform in [0, 1): the top 53 bits of one draw, times 2^-53 (exact in double).
  double uniform();
  /// Uniform integer in [0, n), unbiased (rejection of the short last stripe). n must be > 0.
  std::uint64_t below(std::uint64_t n);
  /// Standard normal by Box-Muller; one uniform pair yields two normals, consumed in order.
  double gaussian();

private:
  std::uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
};

/// The SimHash matrix W: d x (K*L) standard normal floats, row-major (row r is input dimension
/// r). Column l*K + j is bit j of table l. Values are drawn column by column (all d entries of
/// column 0, then column 1, ...) from Rng(seed), so for a fixed (seed, d) the matrix for a
/// smaller K*L is exactly the leading columns of a larger one: configurations can share one W.
/// Throws std::invalid_argument for d == 0, K outside [1, kMaxK] or L outside [1, kMaxL].
OwnedMatrix simhash_matrix(std::uint64_t seed, std::size_t d, int K, int L);

} // namespace pig::ref
