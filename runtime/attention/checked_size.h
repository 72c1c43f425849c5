// Size arithmetic that refuses to wrap: memory sizes computed from a requested capacity (a
// client may ask for any number of tokens) throw std::length_error instead of wrapping to a
// small number that would then be allocated and overrun.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace pig::runtime::detail {

inline std::size_t CheckedMul(std::size_t a, std::size_t b, const char *what) {
  std::size_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw std::length_error(std::string(what) + ": the size overflows (" + std::to_string(a) +
                            " x " + std::to_string(b) + ")");
  return r;
}

inline std::size_t CheckedAdd(std::size_t a, std::size_t b, const char *what) {
  std::size_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw std::length_error(std::string(what) + ": the size overflows (" + std::to_string(a) +
                            " + " + std::to_string(b) + ")");
  return r;
}

} // namespace pig::runtime::detail
