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
  // Decode path for Q4_0 / Q4_1 / Q8_0: the vector quantised to int16 per 32-block (scale
  // and exact float sum per block), then y[r] for rows [row_begin, row_end) by integer dots.
  void (*quantize_i16)(const float *x, size_t n, int16_t *xq, float *scale, float *sum);
  void (*matvec_i16)(const WeightMatrix &w, const int16_t *xq, const float *xscale,
                     const float *xsum, float *y, size_t row_begin, size_t row_end);
  void (*matmul_rows)(const WeightMatrix &w, const float *x, size_t x_stride, size_t n_tokens,
                      float *y, size_t y_stride, size_t row_begin, size_t row_end);
};

// The best target of this CPU (resolved once).
const Kernels &BestKernels();
// One entry per target compiled in and supported here (tests run each of them).
std::vector<Kernels> AllKernels();

// y (n_tokens x w.rows) = x (n_tokens x w.cols) * w^T, split over the pool by row blocks.
// One token with a Q4_0 / Q4_1 / Q8_0 matrix takes the integer decode path.
void MatMul(ThreadPool &pool, const Kernels &k, const WeightMatrix &w, const float *x,
            size_t n_tokens, float *y);

// Several matrices of the same width applied to the same x (y_j = x * w_j^T): at decode the
// vector is quantised once and all row blocks share one parallel loop (Q/K/V, gate/up).
struct MatMulJob {
  const WeightMatrix *w;
  float *y;
};
void MatMulShared(ThreadPool &pool, const Kernels &k, const MatMulJob *jobs, size_t n_jobs,
                  const float *x, size_t n_tokens);

} // namespace pig::runtime
