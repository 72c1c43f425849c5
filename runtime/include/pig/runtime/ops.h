// Op-level entry points of the runtime's SIMD kernels. `Kernels` holds the function pointers of
// one Highway target; the forward pass resolves it once (best target of this CPU) and calls
// through it, so dispatch happens once per step and never per element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pig/runtime/ggml_types.h"
#include "pig/runtime/thread_pool.h"

namespace pig::runtime {

// A 2-D weight in its file format: `rows` rows of `cols` elements, `row_bytes` apart.
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t *data = nullptr;
  size_t rows = 0, cols = 0, row_bytes = 0;
};

struct Kernels {
  const char *target = "";
  void (*dequant_row)(GgmlType type, const uint8_t *src, float *dst, size_t n);
  float (*dot)(const float *a, const float *b, size_t n);
  void (*rms_norm)(const float *x, const float *w, float *y, size_t n, float eps);
  void (*swiglu)(float *gate, const float *up, size_t n);
  void (*softmax)(float *x, size_t n);
  void (*axpy)(float a, const float *x, float *y, size_t n);
  // y[t][r] = sum_c w[r][c] * x[t][c] for rows [row_begin, row_end) and t in [0, n_tokens);
  // x rows are x_stride floats apart, y rows y_stride. Dequantises a few rows at a time.
  // Decode path for Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K: the vector quantised to int16 per 32-block
  // (scale and exact float sum per block), then y[r] for rows [row_begin, row_end) by integer
  // dots.
  void (*quantize_i16)(const float *x, size_t n, int16_t *xq, float *scale, float *sum);
  void (*matvec_i16)(const WeightMatrix &w, const int16_t *xq, const float *xscale,
                     const float *xsum, float *y, size_t row_begin, size_t row_end);
  // The same for n_x activation rows (xq rows w.cols apart, scales and sums w.cols / 32 apart):
  // y[t * y_stride + r]. Each weight block is read once for all rows, and row t's results are
  // bit-identical to matvec_i16 on row t alone, whatever n_x and the other rows are.
  void (*matmul_i16)(const WeightMatrix &w, const int16_t *xq, const float *xscale,
                     const float *xsum, size_t n_x, float *y, size_t y_stride, size_t row_begin,
                     size_t row_end);
  void (*matmul_rows)(const WeightMatrix &w, const float *x, size_t x_stride, size_t n_tokens,
                      float *y, size_t y_stride, size_t row_begin, size_t row_end);
};

// The best target of this CPU (resolved once).
const Kernels &BestKernels();
// One entry per target compiled in and supported here (tests run each of them).
std::vector<Kernels> AllKernels();

// Whether weights of type t have the integer path (activations quantised to int16 per row,
// integer dots straight from the blocks): Q4_0, Q4_1, Q8_0, Q4_K, Q6_K. Other types (F16, BF16,
// F32) always take the f32 matrix-matrix kernels (dequantise a few weight rows, then f32 FMAs).
bool HasIntegerPath(GgmlType t);

// The integer path's quantised activations (grown on use, never shrunk): a caller that owns one
// makes repeated calls allocation-free; without one the calling thread's own is used.
struct MatMulScratch {
  std::vector<int16_t> xq;
  std::vector<float> scale, sum;
  size_t bytes() const {
    return xq.capacity() * sizeof(int16_t) + (scale.capacity() + sum.capacity()) * sizeof(float);
  }
};

// Which kernels multiply the tokens. Both are batch-independent: a token's row of y is
// bit-identical whatever the other tokens are, on a given path (kernels_test).
//   kInteger: the integer path where the weight type has one (else the f32 kernels): reads each
//             block once, no dequantisation; the fastest for a few tokens (decode rows).
//   kFloat:   the f32 matrix-matrix kernels: dequantise a few weight rows once for up to 64
//             tokens, then f32 FMAs; the fastest for many tokens (prefill chunks).
//   kAuto:    kInteger for up to kAutoIntegerTokens tokens, else kFloat.
// Measured on an AMD EPYC (Zen 2, AVX2), 2 threads, a cache-resident 576-column Q4_1 matrix
// (pig-bench-batch prints this table): integer 34.8 / 43.5 / 45.8 / 42.4 GMAC/s at 1 / 4 / 8 / 16
// tokens, f32 11.5 / 32.3 / 41.3 / 48.6 (60 at 64): Zen 2 issues the integer multiply-adds on one
// pipe, the FMAs on two (docs/PERFORMANCE.md#batched-decode-pig-bench-batch).
enum class MatMulPath { kAuto, kInteger, kFloat };
constexpr size_t kAutoIntegerTokens = 8;

// y (n_tokens x w.rows) = x (n_tokens x w.cols) * w^T, split over the pool by row blocks.
void MatMul(ThreadPool &pool, const Kernels &k, const WeightMatrix &w, const float *x,
            size_t n_tokens, float *y, MatMulScratch *scratch = nullptr,
            MatMulPath path = MatMulPath::kAuto);

// Several matrices of the same width applied to the same x (y_j = x * w_j^T): on the integer
// path the activations are quantised once and all row blocks share one parallel loop (Q/K/V,
// gate/up).
struct MatMulJob {
  const WeightMatrix *w;
  float *y;
};
void MatMulShared(ThreadPool &pool, const Kernels &k, const MatMulJob *jobs, size_t n_jobs,
                  const float *x, size_t n_tokens, MatMulScratch *scratch = nullptr,
                  MatMulPath path = MatMulPath::kAuto);

} // namespace pig::runtime
