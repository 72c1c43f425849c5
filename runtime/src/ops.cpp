// Compiles runtime/kernels/ops-inl.h once per Highway target and exports op-level functions.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/src/ops.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include <algorithm>
#include <vector>

#include "hwy/highway.h"
#include "pig/runtime/ops.h"
#include "runtime/kernels/ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::HWY_NAMESPACE {

void DequantRow(GgmlType type, const uint8_t *src, float *dst, size_t n) {
  DequantRowImpl(type, src, dst, n);
}
float Dot(const float *a, const float *b, size_t n) { return DotImpl(a, b, n); }
void RmsNorm(const float *x, const float *w, float *y, size_t n, float eps) {
  RmsNormImpl(x, w, y, n, eps);
}
void SwiGlu(float *gate, const float *up, size_t n) { SwiGluImpl(gate, up, n); }
void Softmax(float *x, size_t n) { SoftmaxImpl(x, n); }
void Axpy(float a, const float *x, float *y, size_t n) { AxpyImpl(a, x, y, n); }
void Attend(const float *q, const float *keys, const float *values, size_t n_keys, size_t hd,
            float scale, float *scores, float *out) {
  AttendImpl(q, keys, values, n_keys, hd, scale, scores, out);
}

// Rows are dequantised kRowBlock at a time into a per-thread buffer that stays in cache, then
// multiplied with kTokenBlock activation rows at a time (4 weight rows share each x load).
void MatMulRows(const WeightMatrix &w, const float *x, size_t x_stride, size_t n_tokens, float *y,
                size_t y_stride, size_t row_begin, size_t row_end) {
  constexpr size_t kRowBlock = 16, kTokenBlock = 64;
  thread_local std::vector<float> buf;
  const size_t cols = w.cols;
  if (buf.size() < kRowBlock * cols)
    buf.resize(kRowBlock * cols);
  for (size_t r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
    const size_t nr = std::min(kRowBlock, row_end - r0);
    for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenBlock) {
      const size_t nt = std::min(kTokenBlock, n_tokens - t0);
      // Re-dequantising per token block keeps both operands cache-resident for long prompts.
      for (size_t r = 0; r < nr; ++r) {
        DequantRowImpl(w.type, w.data + (r0 + r) * w.row_bytes, buf.data() + r * cols, cols);
      }
      size_t t = t0;
      if (nr % 4 == 0) { // three tokens x four rows per micro-kernel call
        for (; t + 3 <= t0 + nt; t += 3) {
          for (size_t r = 0; r < nr; r += 4) {
            Dot4x3Impl(buf.data() + r * cols, cols, x + t * x_stride, x_stride, cols,
                       y + t * y_stride + r0 + r, y_stride);
          }
        }
      }
      for (; t < t0 + nt; ++t) {
        const float *xt = x + t * x_stride;
        float *yt = y + t * y_stride + r0;
        size_t r = 0;
        for (; r + 4 <= nr; r += 4)
          Dot4Impl(buf.data() + r * cols, cols, xt, cols, yt + r);
        for (; r < nr; ++r)
          yt[r] = DotImpl(buf.data() + r * cols, xt, cols);
      }
    }
  }
}

void QuantizeI16(const float *x, size_t n, int16_t *xq, float *scale, float *sum) {
  QuantizeI16Impl(x, n, xq, scale, sum);
}

void MatVecI16(const WeightMatrix &w, const int16_t *xq, const float *xscale, const float *xsum,
               float *y, size_t row_begin, size_t row_end) {
  const size_t nb = w.cols / 32;
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t *row = w.data + r * w.row_bytes;
    y[r] = w.type == GgmlType::kQ8_0 ? DotQ8I16Impl(row, nb, xq, xscale)
                                     : DotQ4I16Impl(w.type, row, nb, xq, xscale, xsum);
  }
}

Kernels Make() {
  Kernels k;
  k.target = hwy::TargetName(HWY_TARGET);
  k.dequant_row = &DequantRow;
  k.dot = &Dot;
  k.rms_norm = &RmsNorm;
  k.swiglu = &SwiGlu;
  k.softmax = &Softmax;
  k.axpy = &Axpy;
  k.attend = &Attend;
  k.quantize_i16 = &QuantizeI16;
  k.matvec_i16 = &MatVecI16;
  k.matmul_rows = &MatMulRows;
  return k;
}

} // namespace pig::runtime::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pig::runtime {

HWY_EXPORT(Make);

const Kernels &BestKernels() {
  static const Kernels k = HWY_DYNAMIC_DISPATCH(Make)();
  return k;
}

std::vector<Kernels> AllKernels() {
  std::vector<Kernels> out;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    out.push_back(HWY_DYNAMIC_DISPATCH(Make)());
  }
  hwy::SetSupportedTargetsForTest(0);
  return out;
}

bool HasInt16MatVec(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ8_0;
}

void MatMul(ThreadPool &pool, const Kernels &k, const WeightMatrix &w, const float *x,
            size_t n_tokens, float *y) {
  // Row blocks sized so every thread gets several (dynamic balancing), multiples of 16.
  const size_t threads = pool.size();
  size_t block = (w.rows + threads * 4 - 1) / (threads * 4);
  block = std::max<size_t>(16, (block + 15) / 16 * 16);
  const size_t n_blocks = (w.rows + block - 1) / block;
  if (n_tokens == 1 && HasInt16MatVec(w.type)) {
    // Decode: quantise the vector once, then integer dot products straight from the blocks.
    // Buffers of the calling thread, passed by pointer: a thread_local named inside the lambda
    // would resolve to each worker's own (empty) copy.
    thread_local std::vector<int16_t> xq_buf;
    thread_local std::vector<float> scale_buf, sum_buf;
    xq_buf.resize(w.cols);
    scale_buf.resize(w.cols / 32);
    sum_buf.resize(w.cols / 32);
    const int16_t *xq = xq_buf.data();
    const float *xscale = scale_buf.data(), *xsum = sum_buf.data();
    k.quantize_i16(x, w.cols, xq_buf.data(), scale_buf.data(), sum_buf.data());
    pool.ParallelFor(n_blocks, [&](size_t b, size_t) {
      const size_t r0 = b * block, r1 = std::min(w.rows, r0 + block);
      k.matvec_i16(w, xq, xscale, xsum, y, r0, r1);
    });
    return;
  }
  pool.ParallelFor(n_blocks, [&](size_t b, size_t) {
    const size_t r0 = b * block, r1 = std::min(w.rows, r0 + block);
    k.matmul_rows(w, x, w.cols, n_tokens, y, w.rows, r0, r1);
  });
}

} // namespace pig::runtime
#endif // HWY_ONCE
