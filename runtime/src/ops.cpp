// Compiles runtime/kernels/ops-inl.h once per Highway target and exports op-level functions.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/src/ops.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include <algorithm>
#include <type_traits>
#include <vector>

#include "hwy/cache_control.h"
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

// Rows are dequantised kRowBlock at a time into a per-thread buffer that stays in cache, then
// multiplied with kTokenBlock activation rows at a time (4 weight rows share each x load). Every
// (row, token) pair takes the same arithmetic in each micro-kernel (Dot1Impl), so a token's
// results do not depend on the other tokens.
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
          yt[r] = Dot1Impl(buf.data() + r * cols, xt, cols);
      }
    }
  }
}

void QuantizeI16(const float *x, size_t n, int16_t *xq, float *scale, float *sum) {
  QuantizeI16Impl(x, n, xq, scale, sum);
}

constexpr size_t kPrefetchBytes = 4096;

// y[t][r] for activation rows t in [0, n_x) and weight rows r in [row_begin, row_end). The weight
// rows go in sub-blocks of about kSubBytes (cache-resident), each multiplied with every activation
// row, kTile rows at a time, before the next is read; within a tile, DotQI16Rows takes four
// activation rows per weight row (the unpacked block is shared, each row's arithmetic is its own).
template <QKind kKind>
void MatMulI16Kind(const WeightMatrix &w, const int16_t *xq, const float *xscale, const float *xsum,
                   size_t n_x, float *y, size_t y_stride, size_t row_begin, size_t row_end) {
  constexpr size_t kSubBytes = 16 << 10, kTile = 16;
  const size_t cols = w.cols, nb = cols / 32;
  const size_t sub = std::max<size_t>(1, kSubBytes / w.row_bytes);
  for (size_t s0 = row_begin; s0 < row_end; s0 += sub) {
    const size_t s1 = std::min(row_end, s0 + sub);
    for (size_t t0 = 0; t0 < n_x; t0 += kTile) {
      const size_t t1 = std::min(n_x, t0 + kTile);
      for (size_t r = s0; r < s1; ++r) {
        const uint8_t *row = w.data + r * w.row_bytes;
        // Software prefetch kPrefetchBytes ahead of the row being read, on its first pass: the
        // hardware prefetcher alone stops at every 4 KiB page of the mapped file (measured:
        // decode +25 %). Prefetches past the end of the matrix are harmless hints.
        if (t0 == 0) {
          for (size_t off = 0; off < w.row_bytes; off += 64)
            hwy::Prefetch(row + kPrefetchBytes + off);
        }
        const int16_t *xp[4];
        const float *sp[4], *mp[4];
        float out[4];
        auto rows = [&](size_t t, auto g) {
          constexpr size_t G = decltype(g)::value;
          for (size_t i = 0; i < G; ++i) {
            xp[i] = xq + (t + i) * cols;
            sp[i] = xscale + (t + i) * nb;
            mp[i] = xsum + (t + i) * nb;
          }
          if constexpr (kKind == QKind::kQ4_K)
            DotQ4KRows<G>(row, nb / 8, xp, sp, mp, out);
          else if constexpr (kKind == QKind::kQ6_K)
            DotQ6KRows<G>(row, nb / 8, xp, sp, out);
          else
            DotQI16Rows<kKind, G>(row, nb, xp, sp, mp, out);
          for (size_t i = 0; i < G; ++i)
            y[(t + i) * y_stride + r] = out[i];
        };
        size_t t = t0;
        for (; t + 4 <= t1; t += 4)
          rows(t, std::integral_constant<size_t, 4>());
        switch (t1 - t) {
        case 3:
          rows(t, std::integral_constant<size_t, 3>());
          break;
        case 2:
          rows(t, std::integral_constant<size_t, 2>());
          break;
        case 1:
          rows(t, std::integral_constant<size_t, 1>());
          break;
        default:
          break;
        }
      }
    }
  }
}

// f(std::integral_constant<QKind, kind>) for the integer path's weight type t.
template <class F> void WithQKind(GgmlType t, F &&f) {
  switch (t) {
  case GgmlType::kQ4_0:
    return f(std::integral_constant<QKind, QKind::kQ4_0>());
  case GgmlType::kQ4_1:
    return f(std::integral_constant<QKind, QKind::kQ4_1>());
  case GgmlType::kQ4_K:
    return f(std::integral_constant<QKind, QKind::kQ4_K>());
  case GgmlType::kQ6_K:
    return f(std::integral_constant<QKind, QKind::kQ6_K>());
  default:
    return f(std::integral_constant<QKind, QKind::kQ8_0>());
  }
}

void MatVecI16(const WeightMatrix &w, const int16_t *xq, const float *xscale, const float *xsum,
               float *y, size_t row_begin, size_t row_end) {
  WithQKind(w.type, [&](auto kind) {
    constexpr QKind kKind = decltype(kind)::value;
    if constexpr (kKind == QKind::kQ4_K || kKind == QKind::kQ6_K) {
      MatMulI16Kind<kKind>(w, xq, xscale, xsum, 1, y, 0, row_begin, row_end);
    } else {
      const size_t nb = w.cols / 32;
      for (size_t r = row_begin; r < row_end; ++r) {
        const uint8_t *row = w.data + r * w.row_bytes;
        // Software prefetch kPrefetchBytes ahead of the row being read: the hardware prefetcher
        // alone stops at every 4 KiB page of the mapped file (measured: decode +25 %).
        // Prefetches past the end of the matrix are harmless hints.
        for (size_t off = 0; off < w.row_bytes; off += 64)
          hwy::Prefetch(row + kPrefetchBytes + off);
        y[r] = DotQI16Row<kKind>(row, nb, xq, xscale, xsum);
      }
    }
  });
}

// One row: matvec_i16 (the same bits as MatMulI16Kind gives it, faster from memory).
void MatMulI16(const WeightMatrix &w, const int16_t *xq, const float *xscale, const float *xsum,
               size_t n_x, float *y, size_t y_stride, size_t row_begin, size_t row_end) {
  if (n_x == 1)
    return MatVecI16(w, xq, xscale, xsum, y, row_begin, row_end);
  WithQKind(w.type, [&](auto kind) {
    MatMulI16Kind<decltype(kind)::value>(w, xq, xscale, xsum, n_x, y, y_stride, row_begin, row_end);
  });
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
  k.quantize_i16 = &QuantizeI16;
  k.matvec_i16 = &MatVecI16;
  k.matmul_i16 = &MatMulI16;
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

bool HasIntegerPath(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ8_0 ||
         t == GgmlType::kQ4_K || t == GgmlType::kQ6_K;
}

namespace {

// Row blocks sized so every thread gets several (dynamic balancing), multiples of 16.
size_t RowBlock(const ThreadPool &pool, size_t rows) {
  const size_t threads = pool.size();
  const size_t block = (rows + threads * 4 - 1) / (threads * 4);
  return std::max<size_t>(16, (block + 15) / 16 * 16);
}

} // namespace

void MatMul(ThreadPool &pool, const Kernels &k, const WeightMatrix &w, const float *x,
            size_t n_tokens, float *y, MatMulScratch *scratch, MatMulPath path) {
  const MatMulJob job{&w, y};
  MatMulShared(pool, k, &job, 1, x, n_tokens, scratch, path);
}

void MatMulShared(ThreadPool &pool, const Kernels &k, const MatMulJob *jobs, size_t n_jobs,
                  const float *x, size_t n_tokens, MatMulScratch *scratch, MatMulPath path) {
  if (n_tokens == 0 || n_jobs == 0)
    return;
  if (path == MatMulPath::kAuto)
    path = n_tokens <= kAutoIntegerTokens ? MatMulPath::kInteger : MatMulPath::kFloat;
  bool integer = path == MatMulPath::kInteger;
  for (size_t j = 0; j < n_jobs; ++j)
    integer = integer && HasIntegerPath(jobs[j].w->type) && jobs[j].w->cols == jobs[0].w->cols;
  if (!integer && n_jobs > 1) { // each matrix on its own path (as MatMul would take it)
    for (size_t j = 0; j < n_jobs; ++j)
      MatMulShared(pool, k, jobs + j, 1, x, n_tokens, scratch, path);
    return;
  }
  if (!integer) {
    const WeightMatrix &w = *jobs[0].w;
    float *y = jobs[0].y;
    const size_t block = RowBlock(pool, w.rows);
    pool.ParallelFor((w.rows + block - 1) / block, [&](size_t b, size_t) {
      const size_t r0 = b * block, r1 = std::min(w.rows, r0 + block);
      k.matmul_rows(w, x, w.cols, n_tokens, y, w.rows, r0, r1);
    });
    return;
  }
  // Quantise every row once for all the matrices (each row on its own, so a row's result does
  // not depend on the others), then integer dot products straight from the blocks; the row
  // blocks of every matrix form one parallel loop (one hand-off). The scratch is the caller's or
  // this thread's, passed by pointer: a thread_local named inside the lambda would resolve to
  // each worker's own (empty) copy.
  constexpr size_t kMaxJobs = 4;
  if (n_jobs > kMaxJobs) {
    for (size_t j = 0; j < n_jobs; ++j)
      MatMulShared(pool, k, jobs + j, 1, x, n_tokens, scratch, path);
    return;
  }
  thread_local MatMulScratch own;
  MatMulScratch &s = scratch ? *scratch : own;
  const size_t cols = jobs[0].w->cols, nb = cols / 32;
  if (s.xq.size() < n_tokens * cols) {
    s.xq.resize(n_tokens * cols);
    s.scale.resize(n_tokens * nb);
    s.sum.resize(n_tokens * nb);
  }
  for (size_t t = 0; t < n_tokens; ++t)
    k.quantize_i16(x + t * cols, cols, &s.xq[t * cols], &s.scale[t * nb], &s.sum[t * nb]);
  const int16_t *xq = s.xq.data();
  const float *xscale = s.scale.data(), *xsum = s.sum.data();
  size_t block[kMaxJobs], first[kMaxJobs + 1] = {0};
  for (size_t j = 0; j < n_jobs; ++j) {
    block[j] = RowBlock(pool, jobs[j].w->rows);
    first[j + 1] = first[j] + (jobs[j].w->rows + block[j] - 1) / block[j];
  }
  pool.ParallelFor(first[n_jobs], [&](size_t item, size_t) {
    size_t j = 0;
    while (item >= first[j + 1])
      ++j;
    const WeightMatrix &w = *jobs[j].w;
    const size_t r0 = (item - first[j]) * block[j], r1 = std::min(w.rows, r0 + block[j]);
    k.matmul_i16(w, xq, xscale, xsum, n_tokens, jobs[j].y, w.rows, r0, r1);
  });
}

} // namespace pig::runtime
#endif // HWY_ONCE
