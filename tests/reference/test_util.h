// Random inputs for the reference tests, from the reference's own seeded generator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pig/reference/matrix.h"
#include "pig/reference/random.h"

namespace pig::ref::testing {

inline std::vector<float> gaussian_vector(Rng &rng, std::size_t n, double sd = 1.0) {
  std::vector<float> v(n);
  for (float &x : v)
    x = float(sd * rng.gaussian());
  return v;
}

inline OwnedMatrix gaussian_matrix(Rng &rng, std::size_t rows, std::size_t cols, double sd = 1.0) {
  OwnedMatrix m(rows, cols);
  m.data = gaussian_vector(rng, rows * cols, sd);
  return m;
}

} // namespace pig::ref::testing
