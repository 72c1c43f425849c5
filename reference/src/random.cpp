#include "pig/reference/random.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "pig/reference/lsh.h"
#include "pig/spec/hash.h"

namespace pig::ref {

std::uint64_t splitmix64(std::uint64_t &state) { return spec::splitmix64(state); }

Rng::Rng(std::uint64_t seed) {
  // splitmix64 never yields four zero words from any seed, so the state is valid.
  for (auto &word : s_)
    word = splitmix64(seed);
}

Rng::Rng(const std::array<std::uint64_t, 4> &state) {
  if (state[0] == 0 && state[1] == 0 && state[2] == 0 && state[3] == 0)
    throw std::invalid_argument("Rng: the xoshiro256** state must not be all zero");
  for (int i = 0; i < 4; ++i)
    s_[i] = state[std::size_t(i)];
}

static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

std::uint64_t Rng::next_u64() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

std::uint64_t Rng::below(std::uint64_t n) {
  if (n == 0)
    throw std::invalid_argument("Rng::below: n must be > 0");
  // Reject the last, incomplete stripe of n values so every residue is equally likely.
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % n;
}

double Rng::gaussian() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // u1 in (0, 1] so that log(u1) is finite; u2 in [0, 1).
  const double u1 = double((next_u64() >> 11) + 1) * 0x1.0p-53;
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(angle);
  has_spare_ = true;
  return r * std::cos(angle);
}

OwnedMatrix simhash_matrix(std::uint64_t seed, std::size_t d, int K, int L) {
  if (d == 0)
    throw std::invalid_argument("simhash_matrix: dimension d must be >= 1, got 0");
  LshConfig{K, L, 1, seed}.validate();
  const std::size_t columns = std::size_t(K) * std::size_t(L);
  OwnedMatrix W(d, columns);
  Rng rng(seed);
  for (std::size_t c = 0; c < columns; ++c)
    for (std::size_t r = 0; r < d; ++r)
      W.at(r, c) = float(rng.gaussian());
  return W;
}

} // namespace pig::ref
