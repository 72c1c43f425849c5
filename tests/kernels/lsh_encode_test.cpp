// The encode kernels (SimHash codes) and W against pig::ref, for every set on every target.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "lsh_test_util.h"
#include "pig/reference/lsh.h"
#include "pig/reference/random.h"

namespace pig::test {
namespace {

using lsh::DType;
using lsh::KernelRegistry;
using lsh::LshKernelSet;

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

} // namespace
} // namespace pig::test
