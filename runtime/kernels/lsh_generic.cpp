// The generic LSH kernel set (K, L, d and dtype taken at run time) and the SIMD helpers exported
// to host code, compiled for every Highway target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/lsh_generic.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include <cstring>

#include "hwy/highway.h"
#include "pig/reference/kv_quant.h"
#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_kernels.h"
#include "runtime/kernels/lsh-inl.h"
#include "runtime/kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {

LshKernelSet MakeGeneric() { return MakeKernelSet<0, 0, 0, void>(); }

void ToBf16(const float *in, uint16_t *out, size_t n) { sd::F32ToBf16Row(in, out, n); }
void FromBf16(const uint16_t *in, float *out, size_t n) { sd::Bf16ToF32Row(in, out, n); }
void ExpRow(const float *in, float *out, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(sd::ExpClamped(df, hn::LoadU(df, in + i)), df, out + i);
  for (; i < n; ++i) {
    HWY_ALIGN float buf[hn::MaxLanes(df)] = {};
    buf[0] = in[i];
    out[i] = hn::GetLane(sd::ExpClamped(df, hn::Load(df, buf)));
  }
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pig::runtime::lsh {

HWY_EXPORT(MakeGeneric);
HWY_EXPORT(ToBf16);
HWY_EXPORT(FromBf16);
HWY_EXPORT(ExpRow);

LshKernelSet generic_kernel_set() { return HWY_DYNAMIC_DISPATCH(MakeGeneric)(); }

void convert_to_bf16(const float *in, std::uint16_t *out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(ToBf16)(in, out, n);
}
void convert_from_bf16(const std::uint16_t *in, float *out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(FromBf16)(in, out, n);
}
const void *row_address(const void *base, DType dtype, std::size_t d, const PagedRows &paged,
                        std::size_t i) {
  const char *b = static_cast<const char *>(base);
  if (!paged.pages)
    return b + i * row_bytes(dtype, d);
  const std::size_t page = i / paged.page_rows;
  return b + static_cast<std::size_t>(paged.pages[page]) * paged.page_stride +
         (i - page * paged.page_rows) * row_bytes(dtype, d);
}

void row_to_f32(const void *rows, DType dtype, std::size_t i, std::size_t d, float *out) {
  row_to_f32(rows, dtype, PagedRows{}, i, d, out);
}

void row_to_f32(const void *rows, DType dtype, const PagedRows &paged, std::size_t i, std::size_t d,
                float *out) {
  const char *src = static_cast<const char *>(row_address(rows, dtype, d, paged, i));
  if (dtype == DType::f32)
    std::memcpy(out, src, d * sizeof(float));
  else if (dtype == DType::q8)
    ref::dequantize_q8(reinterpret_cast<const std::uint8_t *>(src), d, out);
  else
    convert_from_bf16(reinterpret_cast<const std::uint16_t *>(src), out, d);
}

void exp_clamped(const float *in, float *out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(ExpRow)(in, out, n);
}

} // namespace pig::runtime::lsh
#endif // HWY_ONCE
