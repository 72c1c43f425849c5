// splitmix64 (S. Vigna's, public domain): the one copy of its step and of its finaliser. The
// reference's Rng expands a seed with the step; the runtime's per-(layer, head, position) oracle
// seeds use the finaliser. Outputs are pinned by tests/reference/random_test.cpp.
#pragma once

#include <cstdint>

namespace pig::spec {

/// The Weyl increment of splitmix64 (2^64 / the golden ratio, odd).
inline constexpr std::uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

/// The splitmix64 finaliser: a bijection that spreads every input bit over the output.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// splitmix64: advances `state` by kGoldenGamma and returns the mixed new state.
constexpr std::uint64_t splitmix64(std::uint64_t &state) { return mix64(state += kGoldenGamma); }

} // namespace pig::spec
