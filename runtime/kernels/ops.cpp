// Compiles runtime/kernels/ops-inl.h once per Highway target and exports op-level functions.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/ops.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "pig/runtime/ops.h"
#include "runtime/kernels/matmul_i8-inl.h"
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

void QuantizeI8(const float *x, size_t n, int8_t *xq, float *scale, float *sum) {
  QuantizeI8Impl(x, n, xq, scale, sum);
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

void MatMulI8(const WeightMatrix &w, const int8_t *xq, const float *xscale, const float *xsum,
              size_t n_x, float *y, size_t y_stride, size_t row_begin, size_t row_end) {
  WithQKind(w.type, [&](auto kind) {
    constexpr QKind kKind = decltype(kind)::value;
#ifdef PIG_I8_PACKED
    if constexpr (kKind == QKind::kQ4_0 || kKind == QKind::kQ4_1 || kKind == QKind::kQ8_0) {
      if (w.packed)
        return MatMulPacked16<kKind>(w, xq, xscale, xsum, n_x, y, y_stride, row_begin, row_end);
    }
#endif
    MatMulI8Kind<kKind>(w, xq, xscale, xsum, n_x, y, y_stride, row_begin, row_end);
  });
}

// ---- The instructions' own rates: register-only loops, 12 independent accumulators ----

// The integer path's multiply-add instruction (sequence) on 64 bytes, `iters` x 12 times: returns
// the multiply-adds done. The empty asm statements make u and s opaque each iteration, so nothing
// is hoisted out of the loop.
#pragma GCC diagnostic push // GCC 12's AVX-512 intrinsics (see matmul_i8-inl.h)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
uint64_t Int8PeakLoop(size_t iters) {
#ifdef PIG_I8_SIMD
  I8x64 u, s;
#if HWY_TARGET == HWY_AVX2
  u = {_mm256_set1_epi8(3), _mm256_set1_epi8(3)};
  s = {_mm256_set1_epi8(-5), _mm256_set1_epi8(-5)};
#else
  u = {_mm512_set1_epi8(3)};
  s = {_mm512_set1_epi8(-5)};
#endif
#if HWY_TARGET == HWY_AVX2
  __m256i a[12];
  for (auto &v : a)
    v = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (size_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+v"(u.a), "+v"(s.a));
    for (int j = 0; j < 12; ++j) // 32 multiply-adds a 256-bit sequence: two to 64 bytes
      a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u.a, s.a), ones));
  }
  __m256i t = a[0];
  for (int j = 1; j < 12; ++j)
    t = _mm256_add_epi32(t, a[j]);
  const F32x16 total = {_mm256_cvtepi32_ps(t), _mm256_setzero_ps()};
  const uint64_t per_iter = 12 * 32;
#else
  __m512i a[12];
  for (auto &v : a)
    v = _mm512_setzero_si512();
  for (size_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+v"(u.v), "+v"(s.v));
    for (int j = 0; j < 12; ++j) {
#if HWY_TARGET == HWY_AVX3_DL
      a[j] = Dpbusd(a[j], u.v, s.v);
#else
      a[j] = _mm512_add_epi32(
          a[j], _mm512_madd_epi16(_mm512_maddubs_epi16(u.v, s.v), _mm512_set1_epi16(1)));
#endif
    }
  }
  __m512i t = a[0];
  for (int j = 1; j < 12; ++j)
    t = _mm512_add_epi32(t, a[j]);
  const F32x16 total = {_mm512_cvtepi32_ps(t)};
  const uint64_t per_iter = 12 * 64;
#endif
  volatile float sink = SumLanes(total);
  (void)sink;
  return iters * per_iter;
#else
  // The portable path: scalar integer multiply-adds.
  int32_t a[12] = {};
  int32_t u = 3, s = -5;
  for (size_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+r"(u), "+r"(s));
    for (int j = 0; j < 12; ++j)
      a[j] += u * s;
  }
  volatile int32_t sink = a[0] + a[11];
  (void)sink;
  return iters * 12;
#endif
}
#pragma GCC diagnostic pop

const char *Int8Instruction() {
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
  return "vpdpbusd zmm (AVX-512 VNNI)";
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
  return "vpmaddubsw+vpmaddwd+vpaddd zmm";
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  return "vpmaddubsw+vpmaddwd+vpaddd ymm";
#else
  return "scalar int32";
#endif
}

// The f32 path's fused multiply-add on full vectors, `iters` x 12 times.
uint64_t F32PeakLoop(size_t iters) {
  const hn::ScalableTag<float> df;
  auto x = hn::Set(df, 1.0001f), y = hn::Set(df, 0.9999f);
  decltype(x) a[12];
  for (auto &v : a)
    v = hn::Zero(df);
  for (size_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 12; ++j)
      a[j] = hn::MulAdd(x, y, a[j]);
  }
  auto t = a[0];
  for (int j = 1; j < 12; ++j)
    t = hn::Add(t, a[j]);
  volatile float sink = hn::GetLane(t);
  (void)sink;
  return iters * 12 * hn::Lanes(df);
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
  k.quantize_i8 = &QuantizeI8;
  k.matmul_i8 = &MatMulI8;
  k.matmul_rows = &MatMulRows;
  k.int8_instruction = Int8Instruction();
#ifdef PIG_I8_PACKED
  k.packed_path = true;
#endif
  k.int8_peak_loop = &Int8PeakLoop;
  k.f32_peak_loop = &F32PeakLoop;
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

size_t PackedBlockBytes(GgmlType t) {
  switch (t) {
  case GgmlType::kQ4_0:
    return 288;
  case GgmlType::kQ4_1:
    return 320;
  case GgmlType::kQ8_0:
    return 544;
  default:
    return 0;
  }
}

std::vector<uint8_t> PackRows16(const WeightMatrix &w) {
  const size_t kb = PackedBlockBytes(w.type);
  if (kb == 0 || w.rows % 16 || w.cols % 32 || w.rows == 0)
    return {};
  const size_t nb = w.cols / 32, block = GgmlInfo(w.type).block_bytes;
  const size_t code = w.type == GgmlType::kQ8_0 ? 512 : 256;
  const size_t qs_off = w.type == GgmlType::kQ4_1 ? 4 : 2;
  std::vector<uint8_t> out(w.rows / 16 * nb * kb);
  for (size_t p = 0; p < w.rows / 16; ++p)
    for (size_t b = 0; b < nb; ++b) {
      uint8_t *dst = &out[(p * nb + b) * kb];
      for (size_t r = 0; r < 16; ++r) {
        const uint8_t *src = w.data + (16 * p + r) * w.row_bytes + b * block;
        for (size_t k = 0; k < code / 64; ++k) {
          for (size_t j = 0; j < 4; ++j) {
            const uint8_t c = src[qs_off + 4 * k + j];
            dst[64 * k + 4 * r + j] = w.type == GgmlType::kQ8_0 ? uint8_t(c ^ 0x80) : c;
          }
        }
        std::memcpy(dst + code + 2 * r, src, 2); // d
        if (w.type == GgmlType::kQ4_1)
          std::memcpy(dst + code + 32 + 2 * r, src + 2, 2); // m
      }
    }
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
  bool integer = path != MatMulPath::kFloat;
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
  if (s.xq.size() < 2 * n_tokens * cols) {
    s.xq.resize(2 * n_tokens * cols);
    s.scale.resize(n_tokens * nb);
    s.sum.resize(n_tokens * nb);
  }
  for (size_t t = 0; t < n_tokens; ++t)
    k.quantize_i8(x + t * cols, cols, &s.xq[2 * t * cols], &s.scale[t * nb], &s.sum[t * nb]);
  const int8_t *xq = s.xq.data();
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
    k.matmul_i8(w, xq, xscale, xsum, n_tokens, jobs[j].y, w.rows, r0, r1);
  });
}

} // namespace pig::runtime
#endif // HWY_ONCE
