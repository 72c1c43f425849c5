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
  // Optional: the same weights repacked for the integer path (PackRows16), used where the
  // kernels have a packed path (Kernels::packed_path); `data` stays the file's layout.
  const uint8_t *packed = nullptr;
};

// The integer path's packed layout (Q4_0, Q4_1, Q8_0 with rows a multiple of 16): panels of 16
// rows; per panel and 32-element block, the codes of the 16 rows interleaved four bytes at a
// time (byte group k of every row, then k + 1: one 512-bit vector per group, a lane a row), then
// the 16 rows' f16 scales, then (Q4_1) their f16 minima. Q8_0 codes are stored plus 128 (as
// unsigned bytes). A panel's block is 288 (Q4_0), 320 (Q4_1) or 544 (Q8_0) bytes: the file's
// size. Empty when the type or the row count has no packed layout.
std::vector<uint8_t> PackRows16(const WeightMatrix &w);
size_t PackedBlockBytes(GgmlType t); // per panel and block; 0 without a packed layout

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
  // The integer path for Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K weights
  // (runtime/kernels/matmul_i8-inl.h): an activation row of n elements quantised per 32-element
  // block to two int8 codes an element, xq = n hi codes then n lo codes (x ~ scale (256 hi + lo),
  // int16's precision), the block's scale and exact float sum (a block with a NaN or infinity gets
  // a NaN scale); then 8-bit multiply-adds straight from the weight blocks (vpdpbusd on AVX-512
  // VNNI, vpmaddubsw + vpmaddwd on AVX-512BW and AVX2).
  void (*quantize_i8)(const float *x, size_t n, int8_t *xq, float *scale, float *sum);
  // y[t * y_stride + r] for n_x activation rows (xq rows 2 w.cols apart, scales and sums
  // w.cols / 32 apart) and weight rows [row_begin, row_end). Each weight block is read once for
  // all rows, and row t's results are bit-identical to those of a call with row t alone, whatever
  // n_x and the other rows are.
  void (*matmul_i8)(const WeightMatrix &w, const int8_t *xq, const float *xscale, const float *xsum,
                    size_t n_x, float *y, size_t y_stride, size_t row_begin, size_t row_end);
  void (*matmul_rows)(const WeightMatrix &w, const float *x, size_t x_stride, size_t n_tokens,
                      float *y, size_t y_stride, size_t row_begin, size_t row_end);
  // The machine's peak for each path: register-only loops (12 independent accumulators, no
  // memory operands) of the instruction the path multiplies with; each returns the multiply-adds
  // it did, for the caller to time (pig::app::MeasurePeakMacRate).
  const char *int8_instruction = ""; // e.g. "vpdpbusd zmm (AVX-512 VNNI)"
  // Whether matmul_i8 uses WeightMatrix::packed (16-row panels) where it is set: AVX3_DL only.
  bool packed_path = false;
  uint64_t (*int8_peak_loop)(size_t iters);
  uint64_t (*f32_peak_loop)(size_t iters); // vector FMAs of the target's full width
};

// The best target of this CPU (resolved once).
const Kernels &BestKernels();
// One entry per target compiled in and supported here (tests run each of them).
std::vector<Kernels> AllKernels();

// Whether weights of type t have the integer path (activations quantised to int8 per block,
// integer dots straight from the blocks): Q4_0, Q4_1, Q8_0, Q4_K, Q6_K. Other types (F16, BF16,
// F32) always take the f32 matrix-matrix kernels (dequantise a few weight rows, then f32 FMAs).
bool HasIntegerPath(GgmlType t);

// The integer path's quantised activations (grown on use, never shrunk): a caller that owns one
// makes repeated calls allocation-free; without one the calling thread's own is used.
struct MatMulScratch {
  std::vector<int8_t> xq;
  std::vector<float> scale, sum;
  size_t bytes() const {
    return xq.capacity() + (scale.capacity() + sum.capacity()) * sizeof(float);
  }
};

// Which kernels multiply the tokens. Both are batch-independent: a token's row of y is
// bit-identical whatever the other tokens are, on a given path (kernels_test).
//   kInteger: the integer path where the weight type has one (else the f32 kernels): 8-bit
//             activations against the blocks' codes, each block read once for all tokens.
//   kFloat:   the f32 matrix-matrix kernels: dequantise a few weight rows once for up to 64
//             tokens, then f32 FMAs (the reference-like path; F16 / BF16 / F32 weights always).
//   kAuto:    kInteger where the type has one (the faster at every row count on the Xeon,
//             docs/PERFORMANCE.md#weight-kernels-issue-48; on CPUs without AVX-512 VNNI it
//             was not measured).
enum class MatMulPath { kAuto, kInteger, kFloat };

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
