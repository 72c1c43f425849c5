// LSH kernels, index build family (per Highway target): the counting sort of token-major codes
// into the segmented bucket tables (BuildIndexArgs, lsh_kernels.h; layout: lsh_index.h).

#if defined(PIG_RUNTIME_KERNELS_LSH_BUILD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PIG_RUNTIME_KERNELS_LSH_BUILD_INL_H_
#undef PIG_RUNTIME_KERNELS_LSH_BUILD_INL_H_
#else
#define PIG_RUNTIME_KERNELS_LSH_BUILD_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hwy/base.h"
#include "hwy/highway.h"
#include "pig/runtime/lsh_kernels.h"
#include "runtime/kernels/lsh_common-inl.h"
#include "runtime/kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {

template <int kK, int kL> void BuildIndex(const BuildIndexArgs &a) {
  const std::size_t K = Pick<kK>(std::size_t(a.K)), L = Pick<kL>(std::size_t(a.L));
  const std::size_t buckets = std::size_t(1) << K;
  std::vector<uint32_t> count(buckets + 1);
  std::vector<uint16_t> table(std::min(a.count, kSegment));
  for (std::size_t s0 = 0, s = 0; s0 < a.count; s0 += kSegment, ++s) {
    const std::size_t len = std::min(kSegment, a.count - s0);
    for (std::size_t l = 0; l < L; ++l) {
      for (std::size_t i = 0; i < len; ++i)
        table[i] = a.codes[(s0 + i) * L + l];
      std::fill(count.begin(), count.end(), 0u);
      for (std::size_t i = 0; i < len; ++i)
        ++count[table[i] + 1];
      uint16_t *off = a.offsets + (s * L + l) * (buckets + 1);
      uint32_t run = 0;
      for (std::size_t b = 0; b <= buckets; ++b) {
        run += count[b];
        count[b] = run;
        off[b] = uint16_t(run); // <= len <= 65535
      }
      uint16_t *ids = a.ids + s0 * L + l * len;
      for (std::size_t i = 0; i < len; ++i) // ascending ids within each bucket
        ids[count[table[i]]++] = uint16_t(i);
    }
  }
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // PIG_RUNTIME_KERNELS_LSH_BUILD_INL_H_ toggle
