// Row-major matrix views and owners: one row per token (keys, values) or per input dimension
// (the SimHash matrix W, d x K*L).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace pig::ref {

/// A read-only view of a row-major `rows x cols` float matrix. It never owns memory; the caller
/// keeps the storage alive. Keys and values are viewed as n x d (one row per token).
struct Matrix {
  const float *data = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;

  const float *row(std::size_t i) const { return data + i * cols; }
  std::span<const float> row_span(std::size_t i) const { return {row(i), cols}; }
};

/// An owning row-major matrix, for results (W, centered keys) and synthetic test data.
struct OwnedMatrix {
  std::vector<float> data;
  std::size_t rows = 0;
  std::size_t cols = 0;

  OwnedMatrix() = default;
  OwnedMatrix(std::size_t r, std::size_t c) : data(r * c, 0.0f), rows(r), cols(c) {}

  float *row(std::size_t i) { return data.data() + i * cols; }
  const float *row(std::size_t i) const { return data.data() + i * cols; }
  std::span<const float> row_span(std::size_t i) const { return {row(i), cols}; }
  float &at(std::size_t r, std::size_t c) { return data[r * cols + c]; }
  float at(std::size_t r, std::size_t c) const { return data[r * cols + c]; }

  Matrix view() const { return {data.data(), rows, cols}; }
  // Implicit on purpose: every algorithm takes a Matrix view, and owners are passed directly.
  operator Matrix() const { return view(); } // NOLINT(google-explicit-constructor)
};

} // namespace pig::ref
