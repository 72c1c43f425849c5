// What every LSH kernel family (lsh_encode-inl.h, lsh_build-inl.h, lsh_retrieve-inl.h,
// lsh_attend-inl.h) shares, per Highway target: the vector types, the index segment size, the
// storage type of a row element and Pick, which turns a template constant (0: taken at run time)
// into the value the kernel uses. The template conventions are described in lsh-inl.h.

#if defined(PIG_RUNTIME_KERNELS_LSH_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PIG_RUNTIME_KERNELS_LSH_COMMON_INL_H_
#undef PIG_RUNTIME_KERNELS_LSH_COMMON_INL_H_
#else
#define PIG_RUNTIME_KERNELS_LSH_COMMON_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/base.h"
#include "hwy/highway.h"
#include "pig/runtime/lsh_kernels.h"
#include "runtime/kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
namespace sd = pig::runtime::simd::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

inline constexpr std::size_t kSegment = 65535; // tokens per index segment (ids and offsets u16)

// Storage type of a row element: f32, bf16 as raw bits, or a byte of a q8 row (sd::RowAt).
template <typename T>
using RowOf = std::conditional_t<std::is_same_v<T, float>, float,
                                 std::conditional_t<std::is_same_v<T, Q8>, Q8, uint16_t>>;
template <typename T> constexpr DType DTypeOf() {
  return std::is_same_v<T, float> ? DType::f32 : std::is_same_v<T, Q8> ? DType::q8 : DType::bf16;
}

template <int kConst> HWY_INLINE std::size_t Pick(std::size_t runtime_value) {
  if constexpr (kConst != 0) {
    HWY_ASSERT(runtime_value == std::size_t(kConst));
    return std::size_t(kConst);
  } else {
    return runtime_value;
  }
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // PIG_RUNTIME_KERNELS_LSH_COMMON_INL_H_ toggle
